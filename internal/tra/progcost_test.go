package tra

import (
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/slayers"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// BenchmarkPrograms times one run of each program on a UDP datagram of
// 1,352 bytes (an IPv6 packet of 1,400, the pair's MTU) as the kernel
// measures it (BPF_PROG_TEST_RUN, a run at a time: a translated frame run
// again would be another packet), and reports the median:
// go test -run '^$' -bench Programs ./internal/tra/
func BenchmarkPrograms(b *testing.B) {
	for _, c := range []struct {
		name string
		prog func(*Translator) *ebpf.Program
		in   bool
	}{{"tra_out", func(tr *Translator) *ebpf.Program { return tr.objs.TraOut }, false}, {"tra_out_egress", func(tr *Translator) *ebpf.Program { return tr.objs.TraOutEgress }, false}, {"tra_in", func(tr *Translator) *ebpf.Program { return tr.objs.TraIn }, true}} {
		b.Run(c.name, func(b *testing.B) {
			tr := loadTest(b)
			if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(b), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
				b.Fatal(err)
			}
			f := ipv6Frame(b, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload(make([]byte, 1352)))
			if c.in {
				f = inFrame{from: routerAddr, port: 31000, srcIA: remoteIA, srcHost: remote4,
					l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload(make([]byte, 1352))}}.build(b)
			}
			ns, _ := testNetns.Load(tr)
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			err := netns.Run(ns.(string), func() error {
				for i := 0; i < b.N; i++ {
					_, d, err := c.prog(tr).Benchmark(f, 1, nil)
					if err != nil {
						return err
					}
					ds = append(ds, d)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "ns/run")
		})
	}
}
