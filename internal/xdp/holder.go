package xdp

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// Holder is the XDP program a device already has, and what keeps it there:
// what an operator needs to see before fastpath can attach.
type Holder struct {
	ProgID   ebpf.ProgramID
	ProgName string
	Mode     string // "native", "generic" or "offload"
	// LinkID is the bpf link that holds the program (0: attached through
	// netlink, as ip link and xdp-loader do, with no link).
	LinkID link.ID
	// Pins are the bpffs paths of that link; Pids the processes holding it
	// open. A link with neither is gone as soon as its last holder closes.
	Pins []string
	Pids []int
}

// HolderOf says which XDP program holds the device, if any.
func HolderOf(i Iface) (*Holder, error) {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	if err != nil {
		return nil, err
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return nil, nil
	}
	hd := &Holder{ProgID: ebpf.ProgramID(x.ProgId), Mode: xdpAttachMode(x.AttachMode)}
	if p, err := ebpf.NewProgramFromID(hd.ProgID); err == nil {
		if info, err := p.Info(); err == nil {
			hd.ProgName = info.Name
		}
		p.Close()
	}
	hd.LinkID = xdpLinkOf(hd.ProgID, uint32(l.Attrs().Index))
	if hd.LinkID != 0 {
		hd.Pins = fastpathPinsOf(i, hd.LinkID)
		hd.Pids = processesHolding(hd.LinkID)
	}
	return hd, nil
}

func xdpAttachMode(m uint32) string {
	switch m {
	case 1: // XDP_ATTACHED_DRV
		return "native"
	case 2: // XDP_ATTACHED_SKB
		return "generic"
	case 3: // XDP_ATTACHED_HW
		return "offload"
	}
	return "several modes"
}

// xdpLinkOf finds the XDP bpf link of that program on that ifindex.
func xdpLinkOf(prog ebpf.ProgramID, ifindex uint32) link.ID {
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || info.Program != prog {
			continue
		}
		if x := info.XDP(); x != nil && x.Ifindex == ifindex {
			return it.ID
		}
	}
	return 0
}

// fastpathPinsOf names the device pins of fastpath's instances that hold
// the link: the device's own pin names (link_, behind_) in any instance.
func fastpathPinsOf(i Iface, id link.ID) []string {
	var out []string
	for _, name := range []string{LinkPinName(i), BehindPinName(i)} {
		pins, _ := filepath.Glob(filepath.Join(preflight.BPFFS, "fastpath", "*", "*", name))
		for _, pin := range pins {
			if got, _, err := linkID(pin); err == nil && got == id {
				out = append(out, pin)
			}
		}
	}
	return out
}

// processesHolding lists the processes with a descriptor of the link, as
// /proc/PID/fdinfo shows it (link_id).
func processesHolding(id link.ID) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	want := "link_id:\t" + strconv.FormatUint(uint64(id), 10) + "\n"
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil || target != "anon_inode:bpf_link" {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "fdinfo", fd.Name()))
			if err == nil && strings.Contains(string(b)+"\n", want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// describe says what holds the device and how to remove it.
func (h *Holder) describe(i Iface) string {
	name := h.ProgName
	if name == "" {
		name = "(unnamed)"
	}
	what := fmt.Sprintf("XDP program %s (id %d, %s mode)", name, h.ProgID, h.Mode)
	dev := "dev " + i.Name
	ipLink := "ip link set " + dev
	if i.Netns != "" {
		ipLink = "ip -n " + i.Netns + " link set " + dev
	}
	off := map[string]string{"native": "xdpdrv", "generic": "xdpgeneric", "offload": "xdpoffload"}[h.Mode]
	if off == "" {
		off = "xdp"
	}
	switch {
	case len(h.Pins) > 0:
		fn, inst := filepath.Base(filepath.Dir(filepath.Dir(h.Pins[0]))), filepath.Base(filepath.Dir(h.Pins[0]))
		return fmt.Sprintf("%s holds it: fastpath %s instance %q (pinned at %s); detach it with `fastpath %s detach --name %s` first",
			what, fn, inst, h.Pins[0], fn, inst)
	case h.LinkID != 0 && len(h.Pids) > 0:
		return fmt.Sprintf("%s holds it through bpf link %d, kept open by process %s; stop that process (`bpftool link show id %d` shows it too)",
			what, h.LinkID, joinInts(h.Pids), h.LinkID)
	case h.LinkID != 0:
		return fmt.Sprintf("%s holds it through bpf link %d, pinned outside %s/fastpath; find the pin with `bpftool link show id %d` and remove it (rm PIN) to detach it",
			what, h.LinkID, preflight.BPFFS, h.LinkID)
	case name == "xdp_dispatcher":
		return fmt.Sprintf("%s holds it: xdp-loader's dispatcher; remove it with `xdp-loader unload %s --all`%s", what, i.Name, nsHint(i))
	}
	return fmt.Sprintf("%s holds it, attached through netlink (ip link, xdp-loader or a library); remove it with `%s %s off` if it is not needed, or attach fastpath elsewhere",
		what, ipLink, off)
}

func nsHint(i Iface) string {
	if i.Netns == "" {
		return ""
	}
	return " inside the namespace (nsenter --net=/run/netns/" + i.Netns + ")"
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
