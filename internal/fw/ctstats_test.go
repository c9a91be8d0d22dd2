package fw

import (
	crand "crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// An expired entry that nothing removed yet still takes room: fw ct stats
// and the metrics count it apart from the live ones, where they left it out
// and a table full of dead connections looked empty.
func TestCtStatsCountExpired(t *testing.T) {
	f := ctFirewall(t, "[conntrack]\nenabled = true\n")
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	for _, sp := range []uint16{1000, 1001} {
		run(t, f, ctFrame(t, c, s, layers.IPProtocolUDP, &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: 53}, gopacket.Payload([]byte("x"))))
	}
	run(t, f, ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: 1002, dport: 80, seq: 1, flags: "S"}.layers()...))
	// Unanswered UDP lives 30 s, a SYN 120 s.
	skewClock(t, f, 60*time.Second)
	st, err := f.ConntrackStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Embryonic != 1 || st.EmbryonicExpired != 2 || st.Established != 0 || st.EstablishedExpired != 0 || st.ByState["SYN_SENT"] != 1 {
		t.Errorf("stats %+v: want 1 live (the SYN) and 2 expired embryonic entries", st)
	}
	b, err := scrapeCollector(f.Collector("ct", MetricsOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`fastpath_fw_ct_entries{name="ct",table="embryonic"} 1`, `fastpath_fw_ct_expired_entries{name="ct",table="embryonic"} 2`,
		`fastpath_fw_ct_expired_entries{name="ct",table="established"} 0`, `fastpath_fw_map_entries{map="fw_ct_new",name="ct"} 3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, b)
		}
	}
	if _, err := f.ExpireConns(); err != nil {
		t.Fatal(err)
	}
	if st, err := f.ConntrackStats(); err != nil || st.Embryonic != 1 || st.EmbryonicExpired != 0 {
		t.Errorf("after the gc: %+v, %v; want the SYN alone", st, err)
	}
}

// fw ct gc and fw metrics open an instance from its pins, which holds maps
// and no programs: the gc loads the reaper for them. Before, it called a
// program that was not there and crashed.
func TestExpireFromPins(t *testing.T) {
	labtest.RequireKernel(t)
	b := make([]byte, 3)
	crand.Read(b)
	name := "fp-gc" + hex.EncodeToString(b)
	if err := os.MkdirAll(PinDir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(PinDir(name)) })
	loaded, err := Load(LoadOptions{PinPath: PinDir(name), MaxFlows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	installRules(t, loaded, "[conntrack]\nenabled = true\n")
	run(t, loaded, packet(t, flow("192.0.2.1", "198.51.100.1", 17, 1024, 53), 10))
	skewClock(t, loaded, time.Minute)
	f, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.ExpireConns(); err != nil || n != 1 {
		t.Fatalf("gc through the pins: %d removed, %v; want the expired UDP connection", n, err)
	}
}
