package fw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/cilium/ebpf"
)

// TCP states by number (enum fw_tcp_state), as conntrack -L names them.
var tcpStateNames = []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "LAST_ACK",
	"TIME_WAIT", "CLOSE", "SYN_SENT2", "MAX", "IGNORE", "SYNPROXY_SYN"}

// Conn is a tracked connection as fw ct list shows it: its original
// direction (the first packet's), TCP state, flags and counters.
type Conn struct {
	Proto   Proto      `json:"proto"`
	Src     netip.Addr `json:"src"`
	Dst     netip.Addr `json:"dst"`
	SPort   uint16     `json:"sport"`
	DPort   uint16     `json:"dport"`
	State   string     `json:"state,omitempty"`
	Replied bool       `json:"replied"`
	Assured bool       `json:"assured"`
	// Table is "established" (never evicted) or "embryonic" (an LRU).
	Table    string    `json:"table"`
	Expires  time.Time `json:"expires"`
	Packets  [2]uint64 `json:"packets"`
	Bytes    [2]uint64 `json:"bytes"`
	Synproxy bool      `json:"synproxy,omitempty"`
}

func (c Conn) String() string {
	ends := fmt.Sprintf("%s → %s", netip.AddrPortFrom(c.Src, c.SPort), netip.AddrPortFrom(c.Dst, c.DPort))
	if c.Proto != 6 && c.Proto != 17 {
		ends = fmt.Sprintf("%s → %s", c.Src, c.Dst)
	}
	return fmt.Sprintf("%s %s %s", c.Proto, ends, c.State)
}

// Status bits of an entry (enum fw_ct_status), in its field's width.
const (
	ctsSeenReply = uint8(fwFwCtStatusFW_CTS_SEEN_REPLY)
	ctsAssured   = uint8(fwFwCtStatusFW_CTS_ASSURED)
	ctsSynproxy  = uint8(fwFwCtStatusFW_CTS_SYNPROXY)
)

func ctAddr(family uint8, w [4]uint32) netip.Addr {
	a := netip.AddrFrom16(unwords(w))
	if family == 4 {
		return a.Unmap()
	}
	return a
}

// connOf reads an entry back in its original direction.
func connOf(k fwFwCtKey, e fwFwCtEntry, table string, now time.Time, clock uint64) Conn {
	o := e.Orig & 1
	c := Conn{
		Proto: Proto(k.Proto), Src: ctAddr(k.Family, k.Addr[o]), Dst: ctAddr(k.Family, k.Addr[1-o]),
		SPort: k.Port[o], DPort: k.Port[1-o], Replied: e.Status&ctsSeenReply != 0, Assured: e.Status&ctsAssured != 0,
		Synproxy: e.Status&ctsSynproxy != 0, Table: table, Packets: e.Packets, Bytes: e.Bytes,
		Expires: now.Add(time.Duration(int64(e.ExpiresNs - clock))),
	}
	if c.Proto == 1 || c.Proto == 58 {
		// ICMP: the identifier, and the request's type in place of ports.
		c.SPort, c.DPort = k.Port[0], k.Port[1]
	}
	if c.Proto == 6 && int(e.State) < len(tcpStateNames) {
		c.State = tcpStateNames[e.State]
	}
	return c
}

// ctClock is conntrack's clock now (bpf_ktime_get_coarse_ns plus the skew).
func (f *Firewall) ctClock() (uint64, error) {
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return 0, fmt.Errorf("read the settings: %w", err)
	}
	return uint64(int64(monotonic()) + c.CtSkewNs), nil
}

// ctTables are the two tables by name.
func (f *Firewall) ctTables() []struct {
	name string
	m    *ebpf.Map
} {
	return []struct {
		name string
		m    *ebpf.Map
	}{{"established", f.objs.FwCtEst}, {"embryonic", f.objs.FwCtNew}}
}

// ctBatch is how many entries one batch lookup reads: far more than a
// hash bucket ever holds (the kernel refuses a batch smaller than the
// bucket it stops in).
const ctBatch = 4096

// ctWalk reads a table whole, a batch of entries at a time, and hands each
// batch to fn. The kernel walks a hash map's buckets in order, each under
// its lock, and the cursor is a bucket: entries added or removed meanwhile
// are seen or not, but never make the walk start over. A key-by-key walk
// (the map iterator) does start over when the key it stands on is deleted,
// and gives up after a few times, which a flood of new flows churning the
// embryonic LRU causes at once.
func ctWalk(m *ebpf.Map, fn func([]fwFwCtKey, []fwFwCtEntry)) error {
	keys := make([]fwFwCtKey, ctBatch)
	vals := make([]fwFwCtEntry, ctBatch)
	var cur ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cur, keys, vals, nil)
		if n > 0 {
			fn(keys[:n], vals[:n])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Conns lists the live connections of both tables; expired entries not yet
// removed are left out.
func (f *Firewall) Conns() ([]Conn, error) {
	clock, err := f.ctClock()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []Conn
	for _, t := range f.ctTables() {
		err := ctWalk(t.m, func(ks []fwFwCtKey, es []fwFwCtEntry) {
			for i, e := range es {
				if e.ExpiresNs > clock {
					out = append(out, connOf(ks[i], e, t.name, now, clock))
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("read the %s connections: %w", t.name, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Expires.Before(out[j].Expires) })
	return out, nil
}

// ctSweep deletes the expired entries of both tables, or all with flush;
// it returns how many it deleted. The program's reaper does the deletes:
// under each entry's lock, so that an entry made anew under a key read as
// expired stays, and giving an established entry's source its share back.
func (f *Firewall) ctSweep(flush bool) (int, error) {
	clock, err := f.ctClock()
	if err != nil {
		return 0, err
	}
	n := 0
	for i, t := range f.ctTables() {
		var doomed []fwFwCtKey
		err := ctWalk(t.m, func(ks []fwFwCtKey, es []fwFwCtEntry) {
			for i, e := range es {
				if flush || e.ExpiresNs <= clock {
					doomed = append(doomed, ks[i])
				}
			}
		})
		if err != nil {
			return n, fmt.Errorf("read the %s connections: %w", t.name, err)
		}
		reaped, err := f.reap(i == 0, flush, doomed)
		n += reaped
		if err != nil {
			return n, fmt.Errorf("delete %s connections: %w", t.name, err)
		}
	}
	return n, nil
}

// reap hands keys of one table to the program's reaper, a batch at a time.
func (f *Firewall) reap(est, flush bool, keys []fwFwCtKey) (int, error) {
	const max = int(fwFwCtReapLimitFW_CT_REAP_MAX)
	n := 0
	buf := make([]byte, 0, binary.Size(fwFwCtReapHdr{})+max*binary.Size(fwFwCtKey{}))
	for len(keys) > 0 {
		batch := keys[:min(len(keys), max)]
		keys = keys[len(batch):]
		h := fwFwCtReapHdr{N: uint32(len(batch))}
		if est {
			h.Est = 1
		}
		if flush {
			h.Flush = 1
		}
		var err error
		if buf, err = binary.Append(buf[:0], binary.NativeEndian, h); err == nil {
			buf, err = binary.Append(buf, binary.NativeEndian, batch)
		}
		if err != nil {
			return n, err
		}
		out := make([]byte, len(buf))
		prog, err := f.reaper()
		if err != nil {
			return n, err
		}
		ret, err := prog.Run(&ebpf.RunOptions{Data: buf, DataOut: out})
		if err != nil {
			return n, fmt.Errorf("run the reaper: %w", err)
		}
		if ret != 2 /* XDP_PASS */ {
			return n, fmt.Errorf("the reaper refused its request (returned %d)", ret)
		}
		var done fwFwCtReapHdr
		if _, err := binary.Decode(out, binary.NativeEndian, &done); err != nil {
			return n, err
		}
		n += int(done.Reaped)
	}
	return n, nil
}

// reaper is the program that deletes entries. An instance opened from its
// pins (fw ct gc, fw metrics, fw serve) has maps and no programs: it gets
// the reaper alone, loaded once over those maps.
func (f *Firewall) reaper() (*ebpf.Program, error) {
	if f.objs.FwCtReap != nil {
		return f.objs.FwCtReap, nil
	}
	if f.pinnedReap == nil {
		spec, err := loadFwSpec()
		if err != nil {
			return nil, fmt.Errorf("read the firewall program: %w", err)
		}
		pinAll(spec)
		if err := sizeFromPins(spec, f.dir); err != nil {
			return nil, err
		}
		var objs struct {
			Reap *ebpf.Program `ebpf:"fw_ct_reap"`
		}
		if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: f.dir}}); err != nil {
			return nil, fmt.Errorf("load the connection reaper: %w", err)
		}
		f.pinnedReap = objs.Reap
	}
	return f.pinnedReap, nil
}

// FlushConns forgets every tracked connection: their next packets are
// new (TCP ones picked up mid-stream, unless no_pickup).
func (f *Firewall) FlushConns() (int, error) {
	return f.ctSweep(true)
}

// ExpireConns removes expired entries. The data path deletes an expired
// entry when it meets it, but a connection whose peers went silent is never
// met again: without this, dead entries would fill the established table,
// which never evicts.
func (f *Firewall) ExpireConns() (int, error) {
	return f.ctSweep(false)
}

// CtStats are connection tracking's figures: packets by state (from the
// counters), and the tables' fill.
type CtStats struct {
	On          bool              `json:"on"`
	Packets     map[string]uint64 `json:"packets"`
	Established int               `json:"established_entries"`
	EstMax      uint32            `json:"established_max"`
	Embryonic   int               `json:"embryonic_entries"`
	EmbryoMax   uint32            `json:"embryonic_max"`
	ByState     map[string]int    `json:"tcp_states"`

	// Established and Embryonic count the live entries. The expired ones
	// that no packet met and the gc did not remove yet take room as well:
	// a table is full at live + expired.
	EstablishedExpired int `json:"established_expired"`
	EmbryonicExpired   int `json:"embryonic_expired"`
}

// ConntrackStats counts the live and the expired entries and reads the
// counters.
func (f *Firewall) ConntrackStats() (*CtStats, error) {
	cnt, err := f.Counters()
	if err != nil {
		return nil, err
	}
	return f.ctStats(cnt)
}

// ctStats are the figures with the counters already read.
func (f *Firewall) ctStats(cnt Counters) (*CtStats, error) {
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return nil, fmt.Errorf("read the settings: %w", err)
	}
	st := &CtStats{On: c.CtFlags&ctfOn != 0, Packets: map[string]uint64{}, ByState: map[string]int{},
		EstMax: f.objs.FwCtEst.MaxEntries(), EmbryoMax: f.objs.FwCtNew.MaxEntries()}
	for _, s := range CtStateNames() {
		st.Packets[s] = cnt["ct_"+s]
	}
	clock, err := f.ctClock()
	if err != nil {
		return nil, err
	}
	for i, t := range f.ctTables() {
		live, expired := &st.Established, &st.EstablishedExpired
		if i == 1 {
			live, expired = &st.Embryonic, &st.EmbryonicExpired
		}
		err := ctWalk(t.m, func(ks []fwFwCtKey, es []fwFwCtEntry) {
			for i, e := range es {
				if e.ExpiresNs <= clock {
					*expired++
					continue
				}
				*live++
				if ks[i].Proto == 6 && int(e.State) < len(tcpStateNames) {
					st.ByState[tcpStateNames[e.State]]++
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("read the %s connections: %w", t.name, err)
		}
	}
	return st, nil
}
