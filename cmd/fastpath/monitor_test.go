package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/pcapgo"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// TestMonitorCommand runs fastpath monitor fw once through the CLI: a
// firewall that drops UDP to port 7, frames to ports 7 and 9, and the
// command's JSON lines and pcapng file name the drops with their reason.
func TestMonitorCommand(t *testing.T) {
	tb := labtest.Testbed(t)
	name := tb.Prefix + "mon"
	rules := filepath.Join(t.TempDir(), "r.toml")
	os.WriteFile(rules, []byte("default = \"pass\"\n[[rule]]\nname = \"echo\"\naction = \"drop\"\nproto = \"udp\"\ndport = \"7\"\n"), 0o644)
	t.Cleanup(func() {
		if _, err := os.Stat(fw.PinDir(name)); err == nil {
			fw.Detach(name, nil)
		}
	})
	if _, err := fastpath(t, "fw", "attach", "--name", name, "--netns", tb.DUTIn().Netns, "--rules", rules, tb.DUTIn().Dev); err != nil {
		t.Fatal(err)
	}
	u := tb.DefaultUDP()
	u.DstMAC = tb.DUTIn().MAC
	u.Count = 5
	u.DstPort = 7
	drop, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	u.DstPort = 9
	pass, _ := lab.UDPPackets(u)
	go func() {
		// Sent once the monitor listens: its lease, fw_mon_ctl's first
		// 8 bytes, is set.
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			m, err := ebpf.LoadPinnedMap(filepath.Join(fw.PinDir(name), "fw_mon_ctl"), nil)
			if err != nil {
				continue
			}
			v, err := m.LookupBytes(uint32(0))
			m.Close()
			if err == nil && len(v) >= 8 && binary.NativeEndian.Uint64(v) != 0 {
				break
			}
		}
		gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: append(pass, drop...), CPU: -1})
		if err != nil {
			t.Error(err)
			return
		}
		defer gen.Close()
		gen.Send(context.Background(), lab.SendOptions{Count: 10})
	}()
	file := filepath.Join(t.TempDir(), "m.pcapng")
	out, err := fastpath(t, "monitor", "fw", "--name", name, "--drops", "--count", "5", "--duration", "20s", "--json", "--pcap", file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var e monitor.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.Verdict != monitor.Drop || e.Reason != "drop_rule" || e.Flow.DstPort != 7 || e.Flow.Src != tb.Gen().Addr.Addr() || e.Device != tb.DUTIn().Dev {
			t.Errorf("event %s", l)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if !bytes.Equal(data, drop[0]) && len(data) != len(drop[0]) {
			t.Errorf("frame of %d bytes", len(data))
		}
		n++
	}
	if n != 5 || !bytes.Contains(b, []byte("drop drop_rule rule=echo")) {
		t.Errorf("pcapng: %d frames, comment found: %v", n, bytes.Contains(b, []byte("drop_rule")))
	}
}
