package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// BenchOptions configures a benchmark run.
type BenchOptions struct {
	Scenarios []string
	Runs      int
	// Packets sent per run.
	Packets uint64
	// Interleave runs the scenarios in turns, one run each at each size,
	// rebuilding each scenario every turn: the machine's drift then spreads
	// over all rows alike instead of favouring the ones that ran in a quiet
	// minute.
	Interleave bool
	// MaxSeconds ends a run early, for scenarios so slow that Packets would
	// take minutes (0: no limit).
	MaxSeconds float64
	// Sizes are the frame lengths every scenario runs at, each size a row
	// of its own (ParseSizes reads them from --size). Scenarios with their
	// own packets build them at each size.
	Sizes []int
	// Flows > 0 floods every row that has no flood of its own with this
	// many distinct random flows (GenOptions.Flows); FlowSrc as there.
	Flows   uint32
	FlowSrc netip.Prefix
	// NoCeiling leaves out the generator's ceiling row, which every bench
	// otherwise measures beside its rows.
	NoCeiling bool
	// Prefix of the testbed's names (DefaultPrefix if empty).
	Prefix string
	// CPU the generator is pinned to, which is also where the whole path runs:
	// the veths process in the generator's softirq context.
	CPU     int
	Command string
	// Log receives one line per run; nil discards them.
	Log io.Writer
}

// Validate checks the options and resolves the scenarios before anything is set up.
func (o *BenchOptions) Validate() ([]Scenario, error) {
	scs, err := resolveRuns(o.Scenarios, o.Runs)
	if err != nil {
		return nil, err
	}
	for _, s := range scs {
		if _, ok := fixtures[s.Fixture]; s.Fixture != "" && !ok {
			return nil, fmt.Errorf("scenario %s needs fixture %q, which no package registered", s.Name, s.Fixture)
		}
		if s.SYNFlood {
			return nil, fmt.Errorf("scenario %s measures TCP under a SYN flood with iperf3: run it with fastpath lab tcp %s", s.Name, s.Name)
		}
		if s.Layout == LayoutNone && s.Ends == nil {
			return nil, fmt.Errorf("scenario %s brings its own network but names no ends for the generator and the sink", s.Name)
		}
	}
	if !o.NoCeiling && !slices.ContainsFunc(scs, func(s Scenario) bool { return s.Name == CeilingScenario }) {
		scs = append([]Scenario{scenarios[CeilingScenario]}, scs...)
	}
	if o.Packets < 1000 {
		return nil, fmt.Errorf("--packets %d: send at least 1000 packets per run", o.Packets)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := (Testbed{Prefix: o.Prefix, Layout: LayoutDUT}).Validate(); err != nil {
		return nil, err
	}
	if err := o.validateSizes(scs); err != nil {
		return nil, err
	}
	return scs, nil
}

// validateSizes checks that every scenario's packets can be made at every
// size and fit the lab's veths, so that a bench does not fail at its last
// size after an hour of the others.
func (o *BenchOptions) validateSizes(scs []Scenario) error {
	if len(o.Sizes) == 0 {
		return errors.New("no frame size given (--size 138, or several: --size 138,576,1500)")
	}
	for i, size := range o.Sizes {
		if slices.Contains(o.Sizes[:i], size) {
			return fmt.Errorf("--size %d given twice", size)
		}
		if size > maxLabFrame {
			return fmt.Errorf("--size %d: longer than the lab's jumbo veths take (MTU %d, %d-byte frames)", size, JumboMTU, maxLabFrame)
		}
		if size > LiveMaxFrame && o.Flows > 0 {
			return fmt.Errorf("--flows with --size %d: flood mode is the live-frames generator's, which sends frames of up to %d bytes", size, LiveMaxFrame)
		}
		if _, err := UDPPackets(UDPOptions{Size: size, Count: 1, SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6), Src: Testbed{}.Gen().Addr.Addr(), Dst: Testbed{}.Sink().Addr.Addr()}); err != nil {
			return fmt.Errorf("--size %d: %w", size, err)
		}
		for _, s := range scs {
			if err := dryRunPackets(s, Testbed{Prefix: o.Prefix, Layout: s.Layout}, size); err != nil {
				return fmt.Errorf("scenario %s at --size %d: %w", s.Name, size, err)
			}
		}
	}
	return nil
}

// maxLabFrame is the longest frame, without FCS, the lab's veths pass: a
// jumbo MTU (the bench's testbeds have it for frames over 1514 bytes) and
// an Ethernet header.
const maxLabFrame = JumboMTU + 14

// dryRunPackets builds a scenario's own packets once, without a testbed,
// and checks their length. Scenarios on a fixture's network make theirs
// from traffic of that network, which does not exist yet: they are left to
// fail when their turn comes.
func dryRunPackets(s Scenario, tb Testbed, size int) error {
	if s.Packets == nil || s.Layout == LayoutNone || s.Fixture != "" {
		return nil
	}
	pkts, err := s.Packets(tb, size)
	if err != nil {
		return err
	}
	if len(pkts) == 0 {
		return errors.New("its packet builder made no packets")
	}
	for _, p := range pkts {
		if mtu := BenchMTU(size); len(p) > mtu+14 {
			return fmt.Errorf("its frames are %d bytes at this size, longer than the lab's veths take at it (MTU %d, %d-byte frames)", len(p), mtu, mtu+14)
		}
	}
	return nil
}

// ParseSizes reads --size: one frame length in bytes, or several separated
// by commas ("138,576,1500").
func ParseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--size %q: want frame lengths in bytes, one (138) or several separated by commas (138,576,1500)", s)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// resolveRuns checks what every bench asks first: scenarios that exist
// and a run count.
func resolveRuns(names []string, runs int) ([]Scenario, error) {
	if len(names) == 0 {
		return nil, errors.New("no scenario given")
	}
	scs, err := LookupScenarios(names)
	if err != nil {
		return nil, err
	}
	if runs < 1 {
		return nil, fmt.Errorf("--runs %d: at least one run is needed", runs)
	}
	return scs, nil
}

// Bench runs each scenario on a fresh testbed and returns the report. The
// testbed is taken down after each scenario, also on error or cancellation.
func Bench(ctx context.Context, o BenchOptions) (rep *Report, err error) {
	scs, err := o.Validate()
	if err != nil {
		return nil, err
	}
	// Fixtures come up before the first scenario that needs them and go
	// down after the last, whatever happens in between.
	fixturesUp := map[string]func() error{}
	defer func() {
		for name, teardown := range fixturesUp {
			if terr := teardown(); terr != nil {
				err = errors.Join(err, fmt.Errorf("fixture %s: %w", name, terr))
			}
		}
	}()
	needFixture := func(name string) error {
		if name == "" || fixturesUp[name] != nil {
			return nil
		}
		// Up once for the whole bench: links for its longest frames.
		teardown, err := fixtures[name].Up(FixtureOptions{Prefix: o.Prefix, MTU: BenchMTU(slices.Max(o.Sizes)), Log: o.Log})
		if err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		}
		fixturesUp[name] = teardown
		return nil
	}
	rep = &Report{Started: time.Now().UTC(), Command: o.Command, Commit: buildCommit(), Kernel: kernelRelease(), CPUModel: cpuModel(), CPUs: onlineCPUs()}
	for _, s := range scs {
		if s.Name == "veth" {
			rep.Baseline = "veth"
		}
		rep.Restore = rep.Restore || s.Rewrites
	}
	// Without veth, routed scenarios are compared with plain routing.
	for _, s := range scs {
		if rep.Baseline == "" && s.Name == "routed" {
			rep.Baseline = "routed"
		}
	}
	turns, per := 1, o.Runs
	if o.Interleave {
		turns, per = o.Runs, 1
	}
	// A row is a scenario at a size. Each size's rows run together, so
	// that a row and its baseline and anchor, which are divided by each
	// other, are measured close in time; with --interleave every turn
	// runs every row once, at every size.
	type cell struct {
		s    Scenario
		size int
	}
	var cells []cell
	for _, size := range o.Sizes {
		for _, s := range scs {
			cells = append(cells, cell{s, size})
		}
	}
	rep.Rows = make([]Row, len(cells))
	// What ran so far, when a run stops early.
	partial := func() *Report {
		var done []Row
		for _, r := range rep.Rows {
			if r.Scenario != "" {
				done = append(done, r)
			}
		}
		rep.Rows = done
		rep.Finish()
		return rep
	}
	for turn := 0; turn < turns; turn++ {
		for i, c := range cells {
			s := c.s
			if ctx.Err() != nil {
				return partial(), ctx.Err()
			}
			if err := needFixture(s.Fixture); err != nil {
				return partial(), fmt.Errorf("scenario %s: %w", s.Name, err)
			}
			row, err := benchScenario(ctx, s, c.size, o, rep.Restore, turn*per, per)
			if err != nil {
				return partial(), fmt.Errorf("scenario %s at --size %d: %w", s.Name, c.size, err)
			}
			row.Runs = append(rep.Rows[i].Runs, row.Runs...)
			row.Details = append(rep.Rows[i].Details, row.Details...)
			if rep.Rows[i].Note != "" && row.Note == "" {
				row.Note = rep.Rows[i].Note
			}
			rep.Rows[i] = row
		}
	}
	rep.Finish()
	for i := range rep.Rows {
		if r := &rep.Rows[i]; r.Loss > 0.01 {
			note := fmt.Sprintf("%.1f%% lost on the path: the figure is the DUT's saturation rate", 100*r.Loss)
			if r.Note != "" {
				note += "; " + r.Note
			}
			r.Note = note
		}
	}
	return rep, nil
}

// joinNotes joins the non-empty notes of a row with "; ".
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// benchScenario sets a scenario up and measures runs of it at one size,
// numbered from first+1 of o.Runs in the log.
func benchScenario(ctx context.Context, s Scenario, size int, o BenchOptions, restore bool, first, runs int) (row Row, err error) {
	tb := Testbed{Prefix: o.Prefix, Layout: s.Layout, MTU: BenchMTU(size)}
	if s.Layout != LayoutNone {
		if err := tb.Up(); err != nil {
			return row, err
		}
		defer func() { err = errors.Join(err, tb.Down()) }()
	}
	teardown, err := s.Setup(tb)
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, teardown()) }()

	var pkts [][]byte
	if s.Packets != nil {
		pkts, err = s.Packets(tb, size)
	} else {
		u := tb.DefaultUDP()
		u.Size = size
		pkts, err = UDPPackets(u)
	}
	if err != nil {
		return row, err
	}
	genIf, sinkIf := tb.Gen().Iface(), tb.Sink().Iface()
	if s.Ends != nil {
		if genIf, sinkIf, err = s.Ends(tb); err != nil {
			return row, err
		}
	}
	attach := AttachSink
	if s.SCIONSink {
		attach = AttachSCIONSink
	}
	sink, err := attach(sinkIf, xdp.Native)
	if err != nil {
		return row, err
	}
	defer sink.Close()
	flows, flowSrc := s.Flows, s.FlowSrc
	if flows == 0 && !s.Fixed {
		flows, flowSrc = o.Flows, o.FlowSrc
	}
	gen, err := NewSender(GenOptions{Iface: genIf, Packets: pkts, CPU: o.CPU, Window: !restore, Flows: flows, FlowSrc: flowSrc, Fixed: s.Fixed})
	if err != nil {
		return row, err
	}
	defer gen.Close()

	row = Row{Scenario: s.Name, Description: s.Description, Size: len(pkts[0]), Anchor: s.Anchor, Note: s.Note, Generator: gen.Method()}
	if gen.Method() != MethodLiveFrames {
		row.Note = joinNotes(fmt.Sprintf("sent from an AF_PACKET socket (frames over %d B)", LiveMaxFrame), row.Note)
	}
	// One short warm-up run fills the bridge's FDB, the neighbour caches and
	// the page pools before anything is measured.
	if _, err := gen.Send(ctx, SendOptions{Count: min(o.Packets, 100_000), Duration: time.Second}); err != nil {
		return row, err
	}
	for i := first; i < first+runs; i++ {
		before, err := sink.Total()
		if err != nil {
			return row, err
		}
		st, err := gen.Send(ctx, SendOptions{Count: o.Packets, Duration: time.Duration(o.MaxSeconds * float64(time.Second))})
		if err != nil {
			return row, err
		}
		after, err := settle(sink)
		if err != nil {
			return row, err
		}
		r := Run{Sent: st.Sent, Received: after.Packets - before.Packets, Seconds: st.Elapsed.Seconds(), WallSeconds: st.Wall.Seconds(), OfferedMpps: st.Mpps()}
		if r.Seconds > 0 {
			r.Mpps = float64(r.Received) / r.Seconds / 1e6
		}
		row.Runs = append(row.Runs, r)
		fmt.Fprintf(o.Log, "%-14s %4d B run %d/%d: sent %d, sink %d, %.3f Mpps\n", s.Name, row.Size, i+1, o.Runs, r.Sent, r.Received, r.Mpps)
		if st.Vanished > 0 {
			row.Note = fmt.Sprintf("%d frames vanished at the generator's veth", st.Vanished)
		}
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
	}
	if s.Detail != nil {
		d, err := s.Detail(tb)
		if err != nil {
			return row, err
		}
		if d != nil {
			row.Details = append(row.Details, d)
		}
	}
	if s.Describe != nil {
		what, err := s.Describe(tb)
		if err != nil {
			return row, err
		}
		row.Note = joinNotes(what, row.Note)
	}
	return row, nil
}

// settle waits until the sink's count stops moving: the veths finish their
// NAPI polls shortly after the test run returns.
func settle(s *Sink) (SinkCounters, error) {
	last, err := s.Total()
	for i := 0; i < 50 && err == nil; i++ {
		time.Sleep(10 * time.Millisecond)
		var cur SinkCounters
		cur, err = s.Total()
		if cur == last {
			return cur, err
		}
		last = cur
	}
	return last, err
}

// RunCommit is the revision a report is made from: the binary's own when the
// build stamped it, else the HEAD of the fastpath checkout the command runs
// in (CheckoutCommit); "" when neither is known.
func RunCommit() string {
	if c := buildCommit(); c != "" {
		return c
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return CheckoutCommit(wd)
}

// buildCommit is the revision this binary was built from, with "-dirty"
// when the tree had uncommitted changes; "" when the build did not stamp it
// (go test, go run).
func buildCommit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// onlineCPUs is how many CPUs the machine has online, whatever this
// process's affinity: under `taskset -c 0` runtime.NumCPU says 1, and a
// report would describe a one-CPU machine.
func onlineCPUs() int {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n, err := countCPUList(strings.TrimSpace(string(data)))
	if err != nil {
		return runtime.NumCPU()
	}
	return n
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11".
func countCPUList(list string) (int, error) {
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return 0, fmt.Errorf("CPU list %q: %q is not a CPU or a range of them", list, part)
		}
		n += b - a + 1
	}
	return n, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
