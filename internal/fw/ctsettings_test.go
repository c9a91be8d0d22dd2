package fw

import (
	"net"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/fw/ctref"
)

// Connection tracking's settings across fw load, fw add and fw del: a file
// without a [conntrack] table keeps what runs, [conntrack] enabled = false
// turns it off, and a rule added or deleted on the command line keeps the
// options of the file the instance was loaded from.
func TestCtSettingsKept(t *testing.T) {
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	port := uint16(40000)
	// midStream is an ACK of a connection no table knows: picked up as new
	// by default, invalid with no_pickup, untracked ("none") while off.
	midStream := func() []byte {
		port++
		return ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: port, dport: 80, seq: 1000, ack: 1, flags: "A"}.layers()...)
	}
	tracking := func(t *testing.T, f *Firewall, want string) {
		t.Helper()
		if got, _ := ctStateOf(t, f, midStream()); got != want {
			t.Errorf("a mid-stream ACK is %s, want %s", got, want)
		}
	}
	const plain = "default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"203.0.113.0/24\"\n"

	// fw load of a file that uses no ct_state and has no [conntrack]
	// table, over an instance that tracks: it used to turn tracking off.
	t.Run("load without [conntrack] keeps tracking", func(t *testing.T) {
		f := ctFirewall(t, "[conntrack]\nno_pickup = true\n[[rule]]\naction = \"pass\"\nct_state = \"established\"\n")
		tracking(t, f, ctref.Invalid)
		installRules(t, f, plain)
		tracking(t, f, ctref.Invalid)
		installRules(t, f, "[conntrack]\nenabled = false\n"+plain[len("default = \"pass\"\n"):])
		tracking(t, f, "none")
		// Off stays off for a file that says nothing.
		installRules(t, f, plain)
		tracking(t, f, "none")
	})

	// fw add of a ct_state rule to an instance whose file gave options
	// but needed no tracking yet: it used to turn tracking on with the
	// defaults, forgetting no_pickup and strict.
	t.Run("add keeps the file's options", func(t *testing.T) {
		f := ctFirewall(t, "[conntrack]\nno_pickup = true\nstrict = true\n"+plain[len("default = \"pass\"\n"):])
		tracking(t, f, "none")
		rs, err := ParseRules("command line", []byte("[[rule]]\naction = \"pass\"\nct_state = \"established\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Insert(1, rs.Rules[0]); err != nil {
			t.Fatal(err)
		}
		tracking(t, f, ctref.Invalid)
		if err := f.Delete(2); err != nil {
			t.Fatal(err)
		}
		tracking(t, f, ctref.Invalid)
		got, err := f.Rules()
		if err != nil {
			t.Fatal(err)
		}
		if ct := got.Conntrack; ct == nil || !ct.Enabled || !ct.NoPickup || !ct.Strict {
			t.Errorf("conntrack after fw add and fw del: %+v, want on with no_pickup and strict", ct)
		}
	})

	// An instance that never had options gets Linux's defaults.
	t.Run("add without a file's options tracks as Linux", func(t *testing.T) {
		f := ctFirewall(t, plain)
		rs, err := ParseRules("command line", []byte("[[rule]]\naction = \"pass\"\nct_state = \"established\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Insert(1, rs.Rules[0]); err != nil {
			t.Fatal(err)
		}
		tracking(t, f, ctref.New)
	})
}
