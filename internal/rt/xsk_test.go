package rt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, object, maps string
		back               uint64
		verdict            string
		extra              []string
	}{
		{"xdp_tx", "xdptx_bpfel.o", "", 20000, "tx", nil},
		{"xdp_tx busy-poll", "xdptx_bpfel.o", "", 20000, "tx", []string{"--busy-poll"}},
		{"xdp_firewall", "xdpfirewall_bpfel.o", `{"blocked_src": [["c6120001", "0000000000000000"]]}`, 0, "drop", nil},
	}
	for _, engine := range []string{"interp", "jit"} {
		for _, c := range cases {
			t.Run(c.name+"/"+engine, func(t *testing.T) {
				tb := labtest.Testbed(t)
				mapsOut := filepath.Join(t.TempDir(), "maps-out.json")
				args := []string{"run", filepath.Join("..", "bench", c.object), "--dev", tb.DUTIn().Dev, "--duration", "3", "--json", "--engine", engine, "--maps-out", mapsOut}
				args = append(args, c.extra...)
				if c.maps != "" {
					p := filepath.Join(t.TempDir(), "maps.json")
					os.WriteFile(p, []byte(c.maps), 0o644)
					args = append(args, "--maps-in", p)
				}
				var out bytes.Buffer
				cmd := exec.Command(bin, args...)
				cmd.Stdout = &out
				stderr, err := cmd.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := netns.Run(tb.DUTIn().Netns, cmd.Start); err != nil {
					t.Fatal(err)
				}
				// The runtime says it is ready on stderr once its socket is bound.
				ready, errText := make(chan struct{}), make(chan string, 1)
				go func() {
					var all []string
					sc := bufio.NewScanner(stderr)
					for sc.Scan() {
						all = append(all, sc.Text())
						if strings.Contains(sc.Text(), "queue 0") {
							close(ready)
						}
					}
					errText <- strings.Join(all, "\n")
				}()
				select {
				case <-ready:
				case <-time.After(5 * time.Second):
					t.Fatalf("the runtime did not start: %s", <-errText)
				}
				sink, err := lab.AttachSink(tb.Gen().Iface(), xdp.Native)
				if err != nil {
					t.Fatal(err)
				}
				defer sink.Close()
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
				st, err := gen.Send(context.Background(), lab.SendOptions{Count: 20000, Rate: 20000})
				gen.Close()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					t.Fatalf("fastpath-rt: %v\n%s", err, <-errText)
				}
				var sum map[string]any
				if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
					t.Fatalf("summary %q: %v", out.String(), err)
				}
				got, err := sink.Total()
				if err != nil {
					t.Fatal(err)
				}
				num := func(k string) uint64 { v, _ := sum[k].(float64); return uint64(v) }
				if st.Sent != 20000 || num("packets") != 20000 || num(c.verdict) != 20000 || got.Packets != c.back {
					t.Fatalf("sent %d; runtime %v; back at the generator %d, want %d", st.Sent, sum, got.Packets, c.back)
				}
				// The maps as the instance left them: the firewall counted
				// its drops on the blocked source's entry.
				b, err := os.ReadFile(mapsOut)
				if err != nil {
					t.Fatal(err)
				}
				if c.name == "xdp_firewall" && !strings.Contains(string(b), `["c6120001","204e000000000000"]`) {
					t.Fatalf("maps after the run: %s", b)
				}
				attrs, err := xdp.Lookup(tb.DUTIn().Iface())
				if err != nil {
					t.Fatal(err)
				}
				if attrs.Xdp != nil && attrs.Xdp.Attached {
					t.Fatal("the runtime left its XDP program attached")
				}
			})
		}
	}
}
