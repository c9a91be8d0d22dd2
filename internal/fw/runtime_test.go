package fw

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/rt"
)

func raw(t testing.TB, v any) []byte {
	t.Helper()
	b, err := binary.Append(nil, binary.LittleEndian, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runtimeMaps is a compiled rule set as the userspace runtime's --maps-in
// takes it: the slot's inner maps, and the generation that selects it.
func runtimeMaps(t testing.TB, c *compiled, gen uint32) map[string][]rt.Entry {
	slot := binary.LittleEndian.AppendUint32(nil, gen&1)
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	inner := func(n int, es []rt.Entry) []rt.Entry {
		return []rt.Entry{{Key: slot, Inner: &rt.Inner{MaxEntries: max(n, 1), Entries: es}}}
	}
	lpm4 := func(m map[fwFwLpm4Key]fwFwSpan) []rt.Entry {
		var es []rt.Entry
		for k, v := range m {
			es = append(es, rt.Entry{Key: raw(t, k), Value: raw(t, v)})
		}
		return inner(len(es), es)
	}
	lpm6 := func(m map[fwFwLpm6Key]fwFwSpan) []rt.Entry {
		var es []rt.Entry
		for k, v := range m {
			es = append(es, rt.Entry{Key: raw(t, k), Value: raw(t, v)})
		}
		return inner(len(es), es)
	}
	ports := func(spans []fwFwSpan) []rt.Entry {
		var es []rt.Entry
		for p, s := range spans {
			if s.Len > 0 {
				es = append(es, rt.Entry{Key: u32(uint32(p)), Value: raw(t, s)})
			}
		}
		return inner(65536, es)
	}
	var cands, rules []rt.Entry
	for i, id := range c.cands {
		cands = append(cands, rt.Entry{Key: u32(uint32(i)), Value: u32(id)})
	}
	for i, r := range c.rules {
		rules = append(rules, rt.Entry{Key: u32(uint32(i)), Value: raw(t, r)})
	}
	return map[string][]rt.Entry{
		"fw_gen":        {{Key: u32(0), Value: u32(gen)}},
		"fw_src4":       lpm4(c.src4),
		"fw_dst4":       lpm4(c.dst4),
		"fw_src6":       lpm6(c.src6),
		"fw_dst6":       lpm6(c.dst6),
		"fw_sport":      ports(c.sport),
		"fw_dport":      ports(c.dport),
		"fw_cand":       inner(len(cands), cands),
		"fw_rule_slots": inner(len(rules), rules),
		"fw_set_slots":  inner(1, []rt.Entry{{Key: u32(0), Value: raw(t, c.set)}}),
	}
}

// TestRuntimeAgrees runs the firewall with random nested rule sets in the
// kernel and in the userspace runtime (both engines): the same verdict for
// every packet. This takes the runtime through LPM tries, maps of maps,
// bpf_loop callbacks and the flow table.
func TestRuntimeAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for set := 0; set < 3; set++ {
		rs := randomRuleSet(rng, 100+set*300)
		f := newFirewall(t, "")
		if err := f.Install(rs); err != nil {
			t.Fatal(err)
		}
		gen, _ := f.Generation()
		var pkts [][]byte
		var want []uint32
		for i := 0; i < 600; i++ {
			p := packet(t, randomFlow(rng, rs), 8)
			pkts = append(pkts, p)
			want = append(want, run(t, f, p))
		}
		maps := runtimeMaps(t, compile(rs), gen)
		for _, engine := range []string{"interp", "jit"} {
			got, err := rt.TestRun(rt.TestRunOptions{Object: "fw_bpfel.o", Program: "fw_xdp", Packets: pkts, Engine: engine, Maps: maps})
			if err != nil {
				t.Fatal(err)
			}
			for i := range pkts {
				if got.Packets[i].Ret != want[i] {
					t.Fatalf("set %d, %s, packet %d: verdict %d in the kernel, %d in the runtime", set, engine, i, want[i], got.Packets[i].Ret)
				}
			}
		}
	}
}
