package tra

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// A translator whose daemon is stopped: tra_out takes no path past its
// expiry, and when no path is left and no daemon reads what it would hold,
// it tells the host no route at once.

// setHeartbeat writes the daemon's heartbeat as of age ago (never: as no
// daemon has run).
func (tr *Translator) setHeartbeat(t *testing.T, age time.Duration, never bool) {
	t.Helper()
	v := coarseNow() - uint64(age)
	if never {
		v = 0
	}
	if err := tr.objs.TraHeartbeat.Put(uint32(0), v); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredPathsNotTaken(t *testing.T) {
	tr := loadTest(t)
	now := uint64(time.Now().Unix())
	raw := testPath(t)
	at := func(nh bool, expiry uint64) Path {
		p := Path{Raw: raw, MTU: 1472, NextHop: routerAddr, Expiry: expiry}
		if nh {
			p.NextHop = farRouter
		}
		return p
	}
	expired, live, forever := at(false, now-10), at(true, now+3600), at(true, 0)
	flows := make([][]byte, 64)
	for i := range flows {
		flows[i] = ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: layers.UDPPort(40000 + i), DstPort: 31000}, gopacket.Payload("a flow"))
	}
	// Where the flows go: next hops by count, or the verdict of the first
	// that is not sent.
	send := func(t *testing.T) map[string]int {
		t.Helper()
		got := map[string]int{}
		for _, f := range flows {
			ret, out := tr.run(t, tr.objs.TraOut, f, true)
			if ret != tcActRedirect {
				got[fmt.Sprintf("action %d", ret)]++
				continue
			}
			if binary.BigEndian.Uint16(out[12:]) == 0x0800 {
				ip, udp, _, _ := decodeSCION(t, out)
				got[fmt.Sprintf("%s:%d", ip.DstIP, udp.DstPort)]++
				continue
			}
			ip, msg := decodeIPv6(t, out)
			got[fmt.Sprintf("ICMPv6 %d/%d from %s", msg[0], msg[1], ip.SrcIP)]++
		}
		return got
	}
	far, router := farRouter.String(), routerAddr.String()
	cases := []struct {
		name    string
		paths   []Path
		beat    time.Duration // the heartbeat's age; < 0: none ever
		want    map[string]int
		verdict string
	}{
		{"flows spread over two live paths", []Path{at(false, now+3600), live}, time.Second, nil, "translated_out"},
		{"an expired path is not taken; the other is", []Path{expired, live}, time.Second, map[string]int{far: 64}, "translated_out"},
		{"a path without expiry is taken", []Path{expired, forever}, time.Second, map[string]int{far: 64}, "translated_out"},
		{"all expired, the daemon there: held", []Path{expired, at(true, now-1)}, time.Second, map[string]int{"action 2": 64}, "no_path"},
		{"all expired, no daemon ever: held", []Path{expired}, -1, map[string]int{"action 2": 64}, "no_path"},
		{"all expired, the daemon gone: no route", []Path{expired}, 10 * time.Second, map[string]int{"ICMPv6 1/0 from " + remote4SMIP.String(): 64}, "no_daemon"},
		{"no path, the daemon gone: no route", nil, 10 * time.Second, map[string]int{"ICMPv6 1/0 from " + remote4SMIP.String(): 64}, "no_daemon"},
		{"no path, the daemon there: held", nil, 2 * time.Second, map[string]int{"action 2": 64}, "no_path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := tr.SetPaths(remoteIA, c.paths); err != nil {
				t.Fatal(err)
			}
			tr.setHeartbeat(t, c.beat, c.beat < 0)
			before := tr.counts(t)[c.verdict].Packets
			got := send(t)
			if c.want == nil {
				if got[far] == 0 || got[router] == 0 || got[far]+got[router] != 64 {
					t.Fatalf("flows went %v, want over both paths", got)
				}
			} else if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("flows went %v, want %v", got, c.want)
			}
			if n := tr.counts(t)[c.verdict].Packets - before; n != 64 {
				t.Fatalf("%s %d, want 64; counters %v", c.verdict, n, tr.counts(t))
			}
		})
	}
	// Unix time is CLOCK_TAI less the offset in the configuration: told
	// it is two hours more, the programs take a path that expired ten
	// seconds ago as one with two hours to live.
	t.Run("the TAI offset counts", func(t *testing.T) {
		if err := tr.SetPaths(remoteIA, []Path{expired}); err != nil {
			t.Fatal(err)
		}
		tr.setConf(t, func(c *translatorTraConfig) { c.TaiOffset += 7200 })
		defer tr.setConf(t, func(c *translatorTraConfig) { c.TaiOffset -= 7200 })
		if got := send(t); got[router] != 64 {
			t.Fatalf("flows went %v, want all on the path", got)
		}
	})
}

// The daemon's tick writes its heartbeat and the kernel's TAI offset for
// the programs.
func TestDaemonBeats(t *testing.T) {
	p := pinnedTest(t)
	td := newTestDaemon(t, 1, Limits{})
	td.pathDaemon.dp = pinnedPlane{p}
	var c translatorTraConfig
	c.TaiOffset = -1000 // nobody's
	if err := p.conf.Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	before := coarseNow()
	td.tick()
	var beat uint64
	if err := p.heartbeat.Lookup(uint32(0), &beat); err != nil {
		t.Fatal(err)
	}
	if beat < before || beat > coarseNow() {
		t.Fatalf("heartbeat %d, want between %d and %d", beat, before, coarseNow())
	}
	tai, err := taiOffset()
	if err != nil {
		t.Fatal(err)
	}
	if c, err = p.config(); err != nil || c.TaiOffset != tai {
		t.Fatalf("TAI offset %d (%v), want the kernel's %d", c.TaiOffset, err, tai)
	}
}
