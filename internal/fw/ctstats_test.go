package fw

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
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
	var b strings.Builder
	if err := f.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`fastpath_fw_ct_entries{table="embryonic"} 1`, `fastpath_fw_ct_expired_entries{table="embryonic"} 2`, `fastpath_fw_ct_expired_entries{table="established"} 0`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
	if _, err := f.ExpireConns(); err != nil {
		t.Fatal(err)
	}
	if st, err := f.ConntrackStats(); err != nil || st.Embryonic != 1 || st.EmbryonicExpired != 0 {
		t.Errorf("after the gc: %+v, %v; want the SYN alone", st, err)
	}
}
