// Package tralab is the translator's lab scenario: seed 001's table. On the
// lab's SCION network (internal/scionlab), with fastpath's border router in
// front of every AS's reference router (hybrid mode), it measures ways of
// carrying IP between the end hosts of two leaf ASes — rows — in turns:
// iperf3 TCP and UDP with 1 stream and with 4 (four iperf3 processes, one
// stream each), and the round-trip time of a UDP echo. The rows here are plain IPv6 routing (ip, ip-notso), plain IPv6 forwarded in XDP by the ASes' border routers (ip-xdp) and
// scionproto's SCION-IP gateway (sig); the translator's own row registers
// itself the same way (Register). `fastpath lab tra` runs it.
package tralab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// Row is one way of carrying IP between the end hosts of two leaf ASes.
type Row struct {
	// Name is what the command line and the report call it.
	Name        string
	Description string
	// Setup makes the row ready on the running network, between env.Client
	// and env.Server, and returns where to measure and how to undo it. It
	// runs once per turn, after the previous row's teardown; a row must
	// leave the network as it found it (other rows run on it next).
	Setup func(ctx context.Context, env Env) (Path, error)
}

// Env is what a row's setup is given: the running network, its plan, and
// the two leaf ASes whose end hosts the row joins.
type Env struct {
	Net  scionlab.Network
	ASes []scionlab.AS
	// Client is the first leaf AS, Server the last: their end hosts
	// (HostNetns) run the iperf3 and echo clients and servers.
	Client, Server scionlab.AS
	Log            io.Writer
}

// Path is a row made ready: the namespaces the clients and the servers run
// in, the server's address as the client reaches it, and the teardown.
type Path struct {
	ClientNetns, ServerNetns string
	Addr                     netip.Addr
	// Teardown undoes Setup; nil if there is nothing to undo.
	Teardown func() error
	// Note says what the report should say of the row (MTU, offloads).
	Note string
}

var (
	regMu sync.Mutex
	rows  []Row
)

// Register adds a row; rows run, and are reported, in the order they were
// registered (the package's files in name order), or as the command line
// names them. A second row of the same name panics.
func Register(r Row) {
	regMu.Lock()
	defer regMu.Unlock()
	if r.Name == "" || r.Setup == nil {
		panic("tralab: a row needs a name and a setup")
	}
	if slices.ContainsFunc(rows, func(o Row) bool { return o.Name == r.Name }) {
		panic("tralab: row " + r.Name + " registered twice")
	}
	rows = append(rows, r)
}

// Rows are the registered rows, in order.
func Rows() []Row {
	regMu.Lock()
	defer regMu.Unlock()
	return slices.Clone(rows)
}

// Lookup resolves row names; none means every row.
func Lookup(names []string) ([]Row, error) {
	all := Rows()
	if len(names) == 0 {
		return all, nil
	}
	var out []Row
	for _, n := range names {
		i := slices.IndexFunc(all, func(r Row) bool { return r.Name == n })
		if i < 0 {
			var known []string
			for _, r := range all {
				known = append(known, r.Name)
			}
			return nil, fmt.Errorf("no row %q: known are %s", n, strings.Join(known, ", "))
		}
		if slices.ContainsFunc(out, func(r Row) bool { return r.Name == n }) {
			return nil, fmt.Errorf("row %q named twice", n)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Baseline is the row ratios are taken to: plain IPv6 with TSO on.
const Baseline = "ip"

// FairBaseline is the second row ratios are taken to: plain IPv6 between
// the same hosts on the SCION network's own devices, forwarded in XDP by
// each AS's border router (ipxdp.go).
const FairBaseline = "ip-xdp"

// Options configure a run.
type Options struct {
	Rows []string
	// Runs is how many turns: each turn runs every row once, so that the
	// machine's drift hits every row alike.
	Runs int
	// Seconds per iperf3 run; Pings UDP echoes per round-trip figure.
	Seconds, Pings int
	// UDPLen is the iperf3 UDP payload; UDPBitrate the offered load of a UDP
	// run in bit/s, all processes together (0: each as fast as it can).
	UDPLen     int
	UDPBitrate uint64
	// Net is the SCION network to run on, with ASes ASes; it is brought up
	// in hybrid mode if it is not up so, and taken down at the end unless
	// it was up before or Keep is set.
	Net  scionlab.Network
	ASes int
	Keep bool
	// MTU is the network's links' MTU (scionlab.DefaultMTU if 0); a network
	// up at another MTU is an error, not taken down.
	MTU int
	// Version is the scionproto release of a network brought up ("": the
	// one up, else scionproto.Chosen()); a network up at another release
	// is an error, not taken down.
	Version string
	// Command is recorded in the report.
	Command string
	Log     io.Writer
}

// Defaults of the command line.
const (
	DefaultRuns    = 3
	DefaultSeconds = 5
	DefaultPings   = 200
	// DefaultUDPLen fits every row's MTU: 1200 bytes of payload make a
	// 1248-byte IPv6 packet, under ip-notso's 1396 and, translated, under
	// the SCION MTU of 1472 with a path of four hops.
	DefaultUDPLen = 1200
)

// Validate checks the options and resolves the rows before anything runs.
func (o *Options) Validate() ([]Row, error) {
	rs, err := Lookup(o.Rows)
	if err != nil {
		return nil, err
	}
	if o.Runs < 1 {
		return nil, fmt.Errorf("--runs %d: at least one", o.Runs)
	}
	if o.Seconds < 1 {
		return nil, fmt.Errorf("--seconds %d: at least one second per iperf3 run", o.Seconds)
	}
	if o.Pings < 1 {
		return nil, fmt.Errorf("--pings %d: at least one echo", o.Pings)
	}
	if o.UDPLen < 16 || o.UDPLen > 65000 {
		return nil, fmt.Errorf("--udp-len %d: between 16 and 65000 bytes", o.UDPLen)
	}
	if o.ASes == 0 {
		o.ASes = scionlab.DefaultASes
	}
	if _, _, err := o.Net.Plan(o.ASes); err != nil {
		return nil, err
	}
	if o.MTU == 0 {
		o.MTU = scionlab.DefaultMTU
	}
	if err := scionlab.CheckMTU(o.MTU); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, errors.New("iperf3 not found: apt install iperf3")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return rs, o.Net.Validate()
}

// Bench brings the network up (hybrid), runs every row once per turn, and
// reports the figures of all turns.
func Bench(ctx context.Context, o Options) (rep *Report, err error) {
	rs, err := o.Validate()
	if err != nil {
		return nil, err
	}
	if s, err := o.Net.Status(); err == nil && s.MTU != o.MTU && anyRunning(s) {
		return nil, fmt.Errorf("the network in %s is up with links of MTU %d, not %d: take it down first (fastpath --prefix %s lab scion down) or run with --mtu %d",
			o.Net.Dir, s.MTU, o.MTU, o.Net.Prefix, s.MTU)
	}
	if s, err := o.Net.Status(); err == nil && o.Version != "" && s.Version != o.Version && anyRunning(s) {
		return nil, fmt.Errorf("the network in %s is up with scionproto %s, not %s: take it down first (fastpath --prefix %s lab scion down) or run with --scion-version %s",
			o.Net.Dir, s.Version, o.Version, o.Net.Prefix, s.Version)
	}
	version := o.Version
	if s, err := o.Net.Status(); err == nil && version == "" && anyRunning(s) {
		version = s.Version
	}
	before := time.Now()
	st, err := o.Net.Up(ctx, scionlab.UpOptions{Version: version, ASes: o.ASes, Hybrid: true, MTU: o.MTU, Log: o.Log})
	if err != nil {
		return nil, err
	}
	if st.Started.After(before) && !o.Keep {
		defer func() { err = errors.Join(err, o.Net.Down(io.Discard)) }()
	}
	as, _, err := o.Net.ASes()
	if err != nil {
		return nil, err
	}
	env := Env{Net: o.Net, ASes: as, Client: as[1], Server: as[len(as)-1], Log: o.Log}
	rep = &Report{
		Started: time.Now().UTC(), Command: o.Command, Commit: lab.RunCommit(), Machine: lab.ThisMachine(),
		Runs: o.Runs, Seconds: o.Seconds, Pings: o.Pings, UDPLen: o.UDPLen, UDPBitrate: o.UDPBitrate, X4: x4,
		ASes: o.ASes, MTU: st.MTU, ClientIA: env.Client.IA.String(), ServerIA: env.Server.IA.String(),
	}
	for _, r := range rs {
		if r.Name == Baseline {
			rep.Baseline = Baseline
		}
		if r.Name == FairBaseline {
			rep.Fair = FairBaseline
		}
		rep.Rows = append(rep.Rows, RowReport{Row: r.Name, Description: r.Description, Figures: map[string]*Figure{}})
	}
	for turn := 1; turn <= o.Runs; turn++ {
		for i, r := range rs {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			fmt.Fprintf(o.Log, "turn %d/%d: %s\n", turn, o.Runs, r.Name)
			if err := runRow(ctx, r, env, o, &rep.Rows[i]); err != nil {
				rep.finish()
				return rep, fmt.Errorf("row %s, turn %d: %w", r.Name, turn, err)
			}
		}
	}
	rep.finish()
	return rep, nil
}

// anyRunning says whether a process of the network runs.
func anyRunning(s *scionlab.Status) bool {
	for _, a := range s.ASes {
		for _, p := range a.Procs {
			if p.Alive {
				return true
			}
		}
	}
	return false
}

// runRow sets a row up, measures it once and tears it down.
func runRow(ctx context.Context, r Row, env Env, o Options, out *RowReport) (err error) {
	p, err := r.Setup(ctx, env)
	if err != nil {
		return err
	}
	if p.Teardown != nil {
		defer func() { err = errors.Join(err, p.Teardown()) }()
	}
	out.Note = p.Note
	figs, err := measure(ctx, p, o, func(format string, args ...any) {
		fmt.Fprintf(o.Log, "  %-9s "+format+"\n", append([]any{r.Name}, args...)...)
	})
	for _, f := range figs {
		fig := out.Figures[f.metric]
		if fig == nil {
			fig = &Figure{Unit: metricByName(f.metric).Unit}
			out.Figures[f.metric] = fig
		}
		fig.Runs = append(fig.Runs, f.value)
		if f.lossy {
			fig.LostPercent = append(fig.LostPercent, f.lost)
		}
	}
	return err
}
