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
func runtimeMaps(t testing.TB, c *compiled, gen uint32, ov fwFwOverlay) map[string][]rt.Entry {
	slot := binary.LittleEndian.AppendUint32(nil, ov.Base)
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	// array gives the runtime an inner array's non-zero entries.
	array := func(n int, val func(i int) any) []rt.Entry {
		var es []rt.Entry
		for i := range n {
			b := raw(t, val(i))
			for _, x := range b {
				if x != 0 {
					es = append(es, rt.Entry{Key: u32(uint32(i)), Value: b})
					break
				}
			}
		}
		return []rt.Entry{{Key: slot, Inner: &rt.Inner{MaxEntries: max(n, 1), Entries: es}}}
	}
	return map[string][]rt.Entry{
		"fw_gen":           {{Key: u32(0), Value: u32(gen)}},
		"fw_overlays":      {{Key: u32(gen & 1), Value: raw(t, ov)}},
		"fw_set_slots":     array(1, func(int) any { return c.set }),
		"fw_cls4_slots":    array(len(c.cls4), func(i int) any { return c.cls4[i] }),
		"fw_leaf4_slots":   array(len(c.leaf4), func(i int) any { return c.leaf4[i] }),
		"fw_snode4_slots":  array(len(c.snode4), func(i int) any { return c.snode4[i] }),
		"fw_ivl6_slots":    array(len(c.ivl6), func(i int) any { return c.ivl6[i] }),
		"fw_node_slots":    array(len(c.nodes), func(i int) any { return c.nodes[i] }),
		"fw_wild_slots":    array(len(c.wild), func(i int) any { return c.wild[i] }),
		"fw_pwide_slots":   array(len(c.pwide), func(i int) any { return c.pwide[i] }),
		"fw_pnarrow_slots": array(len(c.pnarrow), func(i int) any { return c.pnarrow[i] }),
		"fw_pblock_slots":  array(len(c.pblock), func(i int) any { return c.pblock[i] }),
		"fw_cand_slots":    array(len(c.cands), func(i int) any { return c.cands[i] }),
		"fw_hull_slots":    array(len(c.hulls), func(i int) any { return c.hulls[i] }),
		"fw_rule_slots":    array(len(c.rules), func(i int) any { return c.rules[i] }),
	}
}

// TestRuntimeAgrees runs the firewall with random nested rule sets in the
// kernel and in the userspace runtime (both engines): the same verdict for
// every packet. This takes the runtime through LPM tries, maps of maps,
// bpf_loop callbacks and the flow table.
func TestRuntimeAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for set := 0; set < 4; set++ {
		rs := randomRuleSet(rng, 100+set*300)
		randomFlow := randomFlow
		if set == 3 { // lists longer than a hull block
			rs = longListRuleSet(t, rng, 2000, Drop)
			randomFlow = func(rng *rand.Rand, _ *RuleSet) Flow { return longListFlow(rng) }
		}
		f := newFirewall(t, "")
		if err := f.Install(rs); err != nil {
			t.Fatal(err)
		}
		gen, ov, err := f.overlay()
		if err != nil {
			t.Fatal(err)
		}
		var pkts [][]byte
		var want []uint32
		for i := 0; i < 600; i++ {
			p := packet(t, randomFlow(rng, rs), 8)
			pkts = append(pkts, p)
			want = append(want, run(t, f, p))
		}
		maps := runtimeMaps(t, compile(rs), gen, ov)
		for _, engine := range []string{"interp", "jit", "aot"} {
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
