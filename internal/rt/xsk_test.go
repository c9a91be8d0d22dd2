package rt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// TestRunOverAFXDP runs benchmark programs on the DUT's veth over AF_XDP:
// xdp_tx must send every frame back to the generator's veth, and
// xdp_firewall with the generator's address blocked must drop them all.
// Afterwards nothing is attached.
func TestRunOverAFXDP(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, object, maps string
		back               uint64
		verdict            string
		extra              []string
		tap                bool
	}{
		{"xdp_tx", "xdptx_bpfel.o", "", 20000, "tx", nil, false},
		{"xdp_map passes to a TAP", "xdpmap_bpfel.o", "", 0, "pass", nil, true},
		{"xdp_tx busy-poll", "xdptx_bpfel.o", "", 20000, "tx", []string{"--busy-poll"}, false},
		{"xdp_firewall", "xdpfirewall_bpfel.o", `{"blocked_src": [["c6120001", "0000000000000000"]]}`, 0, "drop", nil, false},
		// No program: the forwarder sends every frame out of the next
		// port, here the only one.
		{"forward", "", "", 20000, "redirect", nil, false},
	}
	for _, engine := range []string{"interp", "jit", "aot"} {
		for _, c := range cases {
			if (engine == "aot" && c.name != "xdp_tx") || (c.object == "" && engine != "interp") {
				continue // AOT on one program; the forwarder, which runs none, once
			}
			t.Run(c.name+"/"+engine, func(t *testing.T) {
				tb := labtest.Testbed(t)
				mapsOut := filepath.Join(t.TempDir(), "maps-out.json")
				obj := filepath.Join("..", "bench", c.object)
				if engine == "aot" {
					native := filepath.Join(t.TempDir(), c.object+".native")
					if err := Compile(obj, native, true); err != nil {
						t.Fatal(err)
					}
					obj = native
				}
				args := []string{"run", obj, "--dev", tb.DUTIn().Dev, "--duration", "5", "--json", "--engine", engine, "--maps-out", mapsOut}
				if c.object == "" {
					args = []string{"forward", "--dev", tb.DUTIn().Dev, "--duration", "5", "--json"}
				}
				args = append(args, c.extra...)
				tapName := tb.Prefix + "tap"
				if c.tap {
					args = append(args, "--tap", tapName)
				}
				if c.maps != "" {
					p := filepath.Join(t.TempDir(), "maps.json")
					os.WriteFile(p, []byte(c.maps), 0o644)
					args = append(args, "--maps-in", p)
				}
				var out bytes.Buffer
				cmd, errText := startRun(t, tb, args, 1, &out)
				sink, err := lab.AttachSink(tb.Gen().Iface(), xdp.Native)
				if err != nil {
					t.Fatal(err)
				}
				defer sink.Close()
				sent := sendUDP(t, tb, 20000)
				if c.tap {
					// PASSed frames reach the stack through the TAP, which
					// lives as long as the runtime.
					time.Sleep(300 * time.Millisecond)
					h, err := netns.Handle(tb.DUTIn().Netns)
					if err != nil {
						t.Fatal(err)
					}
					l, err := h.LinkByName(tapName)
					h.Close()
					if err != nil {
						t.Fatal(err)
					}
					if rx := l.Attrs().Statistics.RxPackets; rx != 20000 {
						t.Fatalf("the TAP received %d frames, want 20000", rx)
					}
				}
				sum, num, _ := waitSummary(t, cmd, errText, &out)
				got, err := sink.Total()
				if err != nil {
					t.Fatal(err)
				}
				if sent != 20000 || num("packets") != 20000 || num(c.verdict) != 20000 || got.Packets != c.back {
					t.Fatalf("sent %d; runtime %v; back at the generator %d, want %d", sent, sum, got.Packets, c.back)
				}
				// The maps as the instance left them: the firewall counted
				// its drops on the blocked source's entry.
				b, err := os.ReadFile(mapsOut)
				if err != nil && c.object != "" {
					t.Fatal(err)
				}
				if c.name == "xdp_firewall" && !strings.Contains(string(b), `["c6120001","204e000000000000"]`) {
					t.Fatalf("maps after the run: %s", b)
				}
				labtest.RequireDetached(t, tb.DUTIn().Iface())
			})
		}
	}
}

// TestRunSeveralQueues: on a veth pair with two queues, frames the
// generator sends from each CPU arrive on that CPU's queue; the runtime
// serves both with a thread each and returns every frame.
func TestRunSeveralQueues(t *testing.T) {
	labtest.RequireKernel(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs to put traffic on two queues")
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	tb := labtest.Testbed(t) // for a unique prefix; its own veths stay unused
	ns := tb.Prefix + "mq"
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	a, b := tb.Prefix+"mqa", tb.Prefix+"mqb"
	if err := netns.Run(ns, func() error {
		// No IPv6: router solicitations would add frames of their own.
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0o644); err != nil {
			return err
		}
		for _, args := range [][]string{
			{"link", "add", a, "numrxqueues", "2", "numtxqueues", "2", "type", "veth", "peer", "name", b, "numrxqueues", "2", "numtxqueues", "2"},
			{"link", "set", a, "up"}, {"link", "set", b, "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		// GRO on the generator's end takes the frames sent back.
		return exec.Command("ethtool", "-K", a, "gro", "on").Run()
	}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", filepath.Join("..", "bench", "xdptx_bpfel.o"), "--dev", b, "--queues", "2", "--duration", "6", "--json", "--engine", "jit")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, _ := cmd.StderrPipe()
	if err := netns.Run(ns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	bound := make(chan struct{})
	go func() {
		n := 0
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " queue ") {
				if n++; n == 2 {
					close(bound)
				}
			}
		}
	}()
	select {
	case <-bound:
	case <-time.After(5 * time.Second):
		t.Fatal("the runtime did not bind both queues")
	}
	sink, err := lab.AttachSink(xdp.Iface{Netns: ns, Name: a}, xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	u := lab.UDPOptions{Size: 100, Count: 100, SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.1.1"), DstPort: 9}
	pkts, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	for cpu := 0; cpu < 2; cpu++ {
		gen, err := lab.NewGenerator(lab.GenOptions{Iface: xdp.Iface{Netns: ns, Name: a}, Packets: pkts, CPU: cpu})
		if err != nil {
			t.Fatal(err)
		}
		_, err = gen.Send(context.Background(), lab.SendOptions{Count: 5000, Rate: 20000})
		gen.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got, _ := sink.Total()
	perQueue, _ := sum["per_queue"].([]any)
	if sum["tx"] != float64(10000) || got.Packets != 10000 || len(perQueue) != 2 || perQueue[0] == float64(0) || perQueue[1] == float64(0) {
		t.Fatalf("runtime %v; back at the generator %d of 10000", sum, got.Packets)
	}
}

// TestRedirectBetweenPorts: the lab's redirect program on both DUT veths,
// one UMEM shared by their sockets: every frame from the generator leaves
// by the other port, the frame it arrived in, and reaches the sink.
func TestRedirectBetweenPorts(t *testing.T) {
	for _, engine := range []string{"interp", "jit"} {
		t.Run(engine, func(t *testing.T) {
			tb := labtest.Testbed(t)
			attrs, err := xdp.Lookup(tb.DUTOut().Iface())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			obj, maps := filepath.Join(dir, "redirect.o"), filepath.Join(dir, "maps.json")
			os.WriteFile(obj, lab.RedirectObject(), 0o644)
			os.WriteFile(maps, []byte(fmt.Sprintf(`{"redirect_port": [["00000000", "%08x"]]}`, bswap32(uint32(attrs.Index)))), 0o644)
			var out bytes.Buffer
			args := []string{"run", obj, "--dev", tb.DUTIn().Dev, "--dev", tb.DUTOut().Dev, "--engine", engine, "--maps-in", maps, "--duration", "5", "--json"}
			cmd, errText := startRun(t, tb, args, 2, &out)
			sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			sent := sendUDP(t, tb, 20000)
			sum, num, text := waitSummary(t, cmd, errText, &out)
			if !strings.Contains(text, "UMEM shared by the queue's sockets") {
				t.Fatalf("the sockets do not share a UMEM:\n%s", text)
			}
			got, err := sink.Total()
			if err != nil {
				t.Fatal(err)
			}
			if sent != 20000 || num("redirect") != 20000 || num("redirect_dropped") != 0 || got.Packets != 20000 {
				t.Fatalf("sent %d; runtime %v; at the sink %d, want 20000", sent, sum, got.Packets)
			}
			labtest.RequireDetached(t, tb.DUTIn().Iface())
		})
	}
}

// bswap32 gives a little-endian u32's bytes as hex reads them.
func bswap32(v uint32) uint32 { return v>>24 | (v>>8)&0xff00 | (v<<8)&0xff0000 | v<<24 }

// startRun starts fastpath-rt in the DUT's namespace and waits until it
// says `bound` sockets of queue 0 are bound. Its stdout goes to out; what it
// said on stderr comes on the channel when it exits.
func startRun(t *testing.T, tb lab.Testbed, args []string, bound int, out *bytes.Buffer) (*exec.Cmd, chan string) {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Run(tb.DUTIn().Netns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	ready, errText := make(chan struct{}), make(chan string, 1)
	go func() {
		var all []string
		n := 0
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all = append(all, sc.Text())
			if strings.Contains(sc.Text(), "queue 0") {
				if n++; n == bound {
					close(ready)
				}
			}
		}
		errText <- strings.Join(all, "\n")
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatalf("the runtime did not start: %s", <-errText)
	}
	return cmd, errText
}

// sendUDP sends n of the testbed's UDP frames from the generator to the
// DUT's first veth, at 20,000 a second; it returns how many left.
func sendUDP(t *testing.T, tb lab.Testbed, n uint64) uint64 {
	t.Helper()
	u := tb.DefaultUDP()
	u.DstMAC = tb.DUTIn().MAC
	pkts, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	st, err := gen.Send(context.Background(), lab.SendOptions{Count: n, Rate: 20000})
	if err != nil {
		t.Fatal(err)
	}
	return st.Sent
}

// waitSummary waits for the run to end and reads its JSON summary: the
// summary, its counters by name, and what the run said on stderr.
func waitSummary(t *testing.T, cmd *exec.Cmd, errText chan string, out *bytes.Buffer) (map[string]any, func(string) uint64, string) {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("fastpath-rt: %v\n%s", err, <-errText)
	}
	text := <-errText
	var sum map[string]any
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	return sum, func(k string) uint64 { v, _ := sum[k].(float64); return uint64(v) }, text
}

// TestStageProfile runs the lab's redirect program (and the forwarder,
// which runs none) between the DUT's veths with --profile-stages: the
// profile counts every frame forwarded once, runs the program once a frame,
// and its stages, timed on the TSC, add up to the loop's wall time by
// CLOCK_MONOTONIC. Without the flag there is no profile.
func TestStageProfile(t *testing.T) {
	type stage struct {
		Stage      string  `json:"stage"`
		Ns         float64 `json:"ns"`
		Laps       uint64  `json:"laps"`
		NsPerFrame float64 `json:"ns_per_frame"`
		Share      float64 `json:"share"`
	}
	type profile struct {
		Frames   uint64  `json:"frames"`
		WallNs   float64 `json:"wall_ns"`
		StagesNs float64 `json:"stages_ns"`
		BusyNs   float64 `json:"busy_ns"`
		Stages   []stage `json:"stages"`
	}
	for _, c := range []struct {
		name    string
		forward bool
		flags   []string
	}{
		{"jit", false, []string{"--profile-stages"}},
		{"forward", true, []string{"--profile-stages"}},
		{"off", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := labtest.Testbed(t)
			attrs, err := xdp.Lookup(tb.DUTOut().Iface())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			obj, maps := filepath.Join(dir, "redirect.o"), filepath.Join(dir, "maps.json")
			os.WriteFile(obj, lab.RedirectObject(), 0o644)
			os.WriteFile(maps, []byte(fmt.Sprintf(`{"redirect_port": [["00000000", "%08x"]]}`, bswap32(uint32(attrs.Index)))), 0o644)
			args := []string{"run", obj, "--dev", tb.DUTIn().Dev, "--dev", tb.DUTOut().Dev, "--engine", "jit", "--maps-in", maps, "--duration", "5", "--json"}
			if c.forward {
				args = []string{"forward", "--dev", tb.DUTIn().Dev, "--dev", tb.DUTOut().Dev, "--duration", "5", "--json"}
			}
			var out bytes.Buffer
			cmd, errText := startRun(t, tb, append(args, c.flags...), 2, &out)
			sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			sent := sendUDP(t, tb, 20000)
			sum, num, text := waitSummary(t, cmd, errText, &out)
			got, err := sink.Total()
			if err != nil {
				t.Fatal(err)
			}
			if sent != 20000 || num("redirect") != 20000 || got.Packets != 20000 {
				t.Fatalf("sent %d; runtime %v; at the sink %d, want 20000", sent, sum, got.Packets)
			}
			if c.flags == nil {
				if _, ok := sum["profile"]; ok || strings.Contains(text, "stage profile") {
					t.Fatalf("a profile without --profile-stages: %v\n%s", sum, text)
				}
				return
			}
			var s struct{ Profile *profile }
			if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Profile == nil {
				t.Fatalf("no profile in %s (%v)", out.String(), err)
			}
			p := s.Profile
			if p.Frames != 20000 {
				t.Errorf("the profile counted %d frames, the runtime forwarded 20000", p.Frames)
			}
			// The stages are laps on one clock: together they are the
			// loop's time, measured on another.
			var total, share float64
			laps := map[string]uint64{}
			for _, st := range p.Stages {
				total += st.Ns
				share += st.Share
				laps[st.Stage] = st.Laps
				if st.Ns < 0 || st.NsPerFrame < 0 {
					t.Errorf("stage %+v", st)
				}
			}
			if math.Abs(total-p.StagesNs) > 0.001*p.StagesNs || math.Abs(p.StagesNs-p.WallNs) > 0.02*p.WallNs {
				t.Errorf("stages add up to %.0f ns (summary %.0f), the loop took %.0f ns", total, p.StagesNs, p.WallNs)
			}
			if math.Abs(share-1) > 0.01 {
				t.Errorf("shares add up to %.3f", share)
			}
			// The program ran once a frame, the forwarder never; every
			// batch received was sent with a kick.
			wantProg := uint64(20000)
			if c.forward {
				wantProg = 0
			}
			if laps["prog"] != wantProg || laps["ctx"] != wantProg || laps["rx"] == 0 || laps["kick"] == 0 || laps["kick"] > laps["tx"] || laps["tx"] > 2*laps["rx"] {
				t.Errorf("laps %v", laps)
			}
			if !strings.Contains(text, "stage profile: 20000 frames") {
				t.Errorf("no table on stderr:\n%s", text)
			}
		})
	}
}
