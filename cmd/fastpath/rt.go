package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/rt"
)

func rtCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rt",
		Short: "userspace XDP runtime: run the XDP objects the kernel loads, outside the kernel",
		Long: `The userspace XDP runtime (fastpath-rt, built from runtime/). Every program is first
loaded into the kernel so that the kernel's verifier checks it; what it refuses is refused.

  fastpath rt run OBJ --dev IFACE [--prog NAME] [--engine interp|jit] [--mode native|generic] [--tap NAME] [--duration S] [--json] [--metrics ADDR]
  fastpath rt test-run OBJ --in IN.pcap [--out OUT.pcap] [--prog NAME] [--repeat N] [--engine interp|jit] [--json] [--dump-maps]
  fastpath rt compile OBJ [-o OBJ.native] [--opt none|all|LIST]   (run and test-run take OBJ.native in place of OBJ: engine aot)
  fastpath rt forward --dev IFACE --dev IFACE [--metrics ADDR] (AF_XDP forwarding with no program: the runtime's I/O alone)
  fastpath rt list OBJ
  fastpath rt verify OBJ [--prog NAME]       (also says which kernel's helper semantics the runtime uses)
  fastpath rt bench [--repeat N] [--aot-opts | --peers [--own]] [--json-file FILE] [--md FILE]
Any command takes --kernel X.Y to behave as that kernel's helpers rather than the running kernel's;
fastpath rt COMMAND --help lists a command's flags.`,
	}
	for _, p := range rtPassThrough {
		cmd.AddCommand(p.command())
	}
	cmd.AddCommand(rtBenchCmd())
	return cmd
}

// rtPass is a command fastpath hands to fastpath-rt as it is: its flags
// are fastpath-rt's, listed here for --help (fastpath-rt's own parser, in
// runtime/src/main.rs, is the authority: keep the two in step).
type rtPass struct {
	use, short string
	flags      string // fastpath-rt's flags for this command, one a line
	// mode: the command attaches an AF_XDP redirect program and takes
	// --mode, which fastpath turns into fastpath-rt's --generic.
	mode bool
	// noJSON: why a command whose name says it reads has no --json.
	noJSON string
}

// rtKernelFlag is fastpath-rt's flag that every command takes.
const rtKernelFlag = "  --kernel X.Y         behave as kernel X.Y's helpers, not the running kernel's\n"

var rtPassThrough = []rtPass{
	{use: "run OBJ --dev IFACE [flags]", short: "run a program on an interface's queue 0 over AF_XDP (TX back out, PASS to --tap)", mode: true, flags: `  --dev IFACE          device to take frames from (again for several)
  --prog NAME          program (or section) of OBJ; needed when it has several
  --engine interp|jit  how the program runs (aot: OBJ.native from fastpath rt compile)
  --mode native|generic  XDP mode of the AF_XDP redirect program (default native; no fallback)
  --tap NAME           a TAP device that takes the frames the program passes
  --duration SECONDS   stop after this long (default: at SIGINT or SIGTERM)
  --json               print the figures as JSON
  --maps-in FILE.json  fill maps from this file before running
  --maps-out FILE.json write the maps here at the end, and at SIGUSR1
  --queues N           queues to serve, 1 to 64 (default 1)
  --busy-poll          poll the queues busily
  --profile-stages     time each stage of the I/O loop; ns per frame per stage at exit (and in --json)
  --batch N            frames taken from an RX ring per pass (default 64)
  --kick drain|once|needed  when to sendto after a batch (default drain: until the TX ring is empty)
  --need-wakeup        bind with XDP_USE_NEED_WAKEUP; when idle, spin unless the kernel asks to be woken
  --fill N             frames given to a fill ring per pass (default: all it has room for)
  --elf PATH           the ELF OBJ.native was compiled from (checked by hash)
  --metrics ADDR       serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; the unit uses 127.0.0.1:30493)
`},
	{use: "test-run OBJ --in IN.pcap [flags]", short: "run a program over a capture: the userspace twin of BPF_PROG_TEST_RUN", flags: `  --in IN.pcap         capture to run
  --out OUT.pcap       write the frames the program emits
  --prog NAME          program (or section) of OBJ; needed when it has several
  --repeat N           run each packet N times (ns per packet)
  --engine interp|jit  how the program runs (aot: OBJ.native from fastpath rt compile)
  --json               one JSON object per packet
  --dump-maps          print the maps at the end
  --maps-in FILE.json  fill maps from this file first
  --no-verify          do not load the program into the kernel's verifier first
  --elf PATH           the ELF OBJ.native was compiled from (checked by hash)
`},
	{use: "compile OBJ [-o OBJ.native]", short: "compile every program of an object ahead of time, for run and test-run without Cranelift", flags: `  -o OBJ.native        output (default: OBJ.native)
  --no-verify          do not load the programs into the kernel's verifier first
  --opt LIST           none, all (default), or typed-values,inline-helpers,const-maps
  --const-map NAME     an array the programs only read, compiled in (again for several)
  --maps-in FILE.json  fill maps from this file first (the contents --const-map compiles in)
`},
	{use: "forward --dev IFACE --dev IFACE [flags]", short: "forward frames between interfaces over AF_XDP with no program: the runtime's I/O ceiling", mode: true, flags: `  --dev IFACE          a device (two or more: each frame leaves by the next)
  --mode native|generic  XDP mode of the AF_XDP redirect program (default native; no fallback)
  --queues N           queues to serve, 1 to 64 (default 1)
  --busy-poll          poll the queues busily
  --profile-stages     time each stage of the I/O loop; ns per frame per stage at exit (and in --json)
  --batch N            frames taken from an RX ring per pass (default 64)
  --kick drain|once|needed  when to sendto after a batch (default drain: until the TX ring is empty)
  --need-wakeup        bind with XDP_USE_NEED_WAKEUP; when idle, spin unless the kernel asks to be woken
  --fill N             frames given to a fill ring per pass (default: all it has room for)
  --duration SECONDS   stop after this long
  --json               print the figures as JSON
  --metrics ADDR       serve Prometheus metrics at http://ADDR/metrics (HOST:PORT; the unit uses 127.0.0.1:30493)
`},
	{use: "list OBJ", short: "list an object's programs and maps", noJSON: "fastpath-rt prints the object's programs and maps as text"},
	{use: "verify OBJ [--prog NAME]", short: "load a program into the kernel's verifier and print its verdict", flags: `  --prog NAME          program (or section) of OBJ; needed when it has several
`},
}

func (p rtPass) command() *cobra.Command {
	c := &cobra.Command{
		Use: p.use, Short: p.short, DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			if wantsHelp(args) {
				fmt.Fprint(c.OutOrStdout(), p.help(c))
				return nil
			}
			if p.mode {
				var err error
				if args, err = rtModeArgs(c, args); err != nil {
					return err
				}
			}
			// run and forward attach to a device: what the kernel lacks is
			// said before fastpath-rt starts, not as a bare errno from it.
			if c.Name() == "run" || c.Name() == "forward" {
				if err := preflight.Kernel(preflight.RT); err != nil {
					return err
				}
			}
			bin, err := rt.Binary()
			if err != nil {
				return err
			}
			x := exec.Command(bin, append([]string{c.Name()}, args...)...)
			x.Stdin, x.Stdout, x.Stderr = os.Stdin, os.Stdout, os.Stderr
			err = x.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode()) // fastpath-rt said why on stderr
			}
			return err
		},
	}
	if p.noJSON != "" {
		c.Annotations = map[string]string{noJSON: p.noJSON}
	}
	if p.mode {
		// Shown in --help and usage tests: the flag is parsed by
		// rtModeArgs, not by cobra (DisableFlagParsing).
		c.Flags().String("mode", "native", "XDP mode of the AF_XDP redirect program: native or generic")
		c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{modeNative, modeGeneric}, cobra.ShellCompDirectiveNoFileComp))
	}
	return c
}

// help is a pass-through command's --help: its use, what it does and
// fastpath-rt's flags for it.
func (p rtPass) help(c *cobra.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nUsage:\n  %s\n\nFlags (fastpath-rt's):\n%s%s  -h, --help           this help\n", p.short, c.UseLine(), p.flags, rtKernelFlag)
	return b.String()
}

// wantsHelp says whether a pass-through command line asks for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}

// rtModeArgs turns --mode native|generic into fastpath-rt's flags: the
// runtime attaches its redirect program in one mode, without falling back.
func rtModeArgs(c *cobra.Command, args []string) ([]string, error) {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		var mode string
		switch {
		case a == "--mode":
			if i+1 == len(args) {
				return nil, fmt.Errorf("--mode needs a value: native or generic")
			}
			i++
			mode = args[i]
		case strings.HasPrefix(a, "--mode="):
			mode = strings.TrimPrefix(a, "--mode=")
		case a == "--generic":
			deprecatedForm(c, "--generic", "--mode generic")
			out = append(out, a)
			continue
		default:
			out = append(out, a)
			continue
		}
		switch mode {
		case modeNative:
		case modeGeneric:
			out = append(out, "--generic")
		case modeAuto:
			return nil, fmt.Errorf("--mode auto: the runtime attaches in one mode and does not fall back; give --mode native or --mode generic")
		default:
			return nil, fmt.Errorf("--mode %q: use native or generic", mode)
		}
	}
	return out, nil
}

func rtBenchCmd() *cobra.Command {
	var (
		repeat, rounds int
		jsonOut, mdOut string
		peers, own     bool
		ubpfLib        string
		plugins        map[string]string
		programs       []string
		aotOpts        bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--repeat N] [--rounds N] [--json-file FILE] [--md FILE] [--peers [--ubpf-lib LIB] [--plugin NAME=LIB] [--own]]",
		Short: "ns per execution of each benchmark program: kernel JIT beside the runtime's engines (JIT, AOT, interpreter)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			dir, err := benchDir()
			if err != nil {
				return err
			}
			if peers && aotOpts {
				return fmt.Errorf("--peers and --aot-opts are two different tables: give one")
			}
			if peers {
				return rtBenchPeers(dir, repeat, rounds, ubpfLib, plugins, programs, own, jsonOut, mdOut)
			}
			if aotOpts {
				return rtBenchAOTOpts(rt.BenchOptions{Repeat: repeat, Rounds: rounds, Dir: dir}, jsonOut, mdOut)
			}
			rows, err := rt.Bench(rt.BenchOptions{Repeat: repeat, Rounds: rounds, Dir: dir})
			if err != nil {
				return err
			}
			fmt.Print(rt.BenchTable(rows, false))
			return writeBenchOutputs(rows, jsonOut, mdOut, func() string { return rt.BenchTable(rows, true) })
		},
	}
	cmd.Flags().IntVar(&repeat, "repeat", 100_000, "runs per measurement")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "measurements per program and engine; the best counts")
	cmd.Flags().StringVar(&jsonOut, "json-file", "", "write the rows as JSON to this file")
	cmd.Flags().StringVar(&jsonOut, "json", "", "write the rows as JSON to this file")
	cmd.Flags().MarkDeprecated("json", "use --json-file")
	cmd.Flags().StringVar(&mdOut, "md", "", "write the table as Markdown")
	cmd.Flags().BoolVar(&peers, "peers", false, "run other userspace engines beside the runtime's (rbpf, ubpf, plugins), built on first use")
	cmd.Flags().StringVar(&ubpfLib, "ubpf-lib", "", "with --peers: a ubpf shared library to use instead of the one built from crates.io")
	cmd.Flags().StringToStringVar(&plugins, "plugin", nil, "with --peers: more engines, NAME=LIB.so (a library with the harness's plugin interface)")
	cmd.Flags().StringSliceVar(&programs, "programs", nil, "with --peers: only these benchmark programs")
	cmd.Flags().BoolVar(&own, "own", false, "with --peers: also run the runtime's own test programs, which no engine was written for")
	cmd.Flags().BoolVar(&aotOpts, "aot-opts", false, "time AOT objects compiled with each --opt (none, each alone, all) instead")
	return cmd
}

// writeBenchOutputs writes --json-file and --md.
func writeBenchOutputs(rows any, jsonOut, mdOut string, md func() string) error {
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if mdOut != "" {
		return os.WriteFile(mdOut, []byte("# fastpath rt bench\n\n"+md()), 0o644)
	}
	return nil
}

func rtBenchPeers(dir string, repeat, rounds int, ubpfLib string, plugins map[string]string, programs []string, own bool, jsonOut, mdOut string) error {
	o := rt.PeersOptions{BenchOptions: rt.BenchOptions{Repeat: repeat, Rounds: rounds, Dir: dir}, Src: filepath.Dir(filepath.Dir(dir)), UbpfLib: ubpfLib, Plugins: plugins, Programs: programs}
	if own {
		o.Extra = rt.OwnPrograms(filepath.Join(filepath.Dir(dir), "rt"))
	}
	rows, err := rt.BenchPeers(o)
	if err != nil {
		return err
	}
	fmt.Print(rt.PeersTable(rows, false))
	return writeBenchOutputs(rows, jsonOut, mdOut, func() string { return rt.PeersTable(rows, true) })
}

// benchDir finds the benchmark objects: internal/bench of the source tree
// the binary was built in, found from the working directory up.
func benchDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "internal", "bench")
		if _, err := os.Stat(filepath.Join(p, "xdptx_bpfel.o")); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("benchmark objects not found: run from the source tree after make build")
		}
	}
}
