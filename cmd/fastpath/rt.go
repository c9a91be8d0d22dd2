package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

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

  fastpath rt run OBJ --dev IFACE [--prog NAME] [--engine interp|jit] [--generic] [--tap NAME] [--duration S] [--json]
  fastpath rt test-run OBJ --in IN.pcap [--out OUT.pcap] [--prog NAME] [--repeat N] [--engine interp|jit] [--json] [--dump-maps]
  fastpath rt compile OBJ [-o OBJ.native]   (run and test-run take OBJ.native in place of OBJ: engine aot)
  fastpath rt forward --dev IFACE --dev IFACE (AF_XDP forwarding with no program: the runtime's I/O alone)
  fastpath rt list OBJ
  fastpath rt verify OBJ [--prog NAME]       (also says which kernel's helper semantics the runtime uses)
  fastpath rt bench [--repeat N] [--json FILE] [--md FILE]
Any command takes --kernel X.Y to behave as that kernel's helpers rather than the running kernel's.`,
	}
	pass := func(use, short string) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, DisableFlagParsing: true,
			RunE: func(c *cobra.Command, args []string) error {
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
	}
	cmd.AddCommand(
		pass("run OBJ --dev IFACE [flags]", "run a program on an interface's queue 0 over AF_XDP (TX back out, PASS to --tap)"),
		pass("test-run OBJ --in IN.pcap [flags]", "run a program over a capture: the userspace twin of BPF_PROG_TEST_RUN"),
		pass("compile OBJ [-o OBJ.native]", "compile every program of an object ahead of time, for run and test-run without Cranelift"),
		pass("forward --dev IFACE --dev IFACE [flags]", "forward frames between interfaces over AF_XDP with no program: the runtime's I/O ceiling"),
		pass("list OBJ", "list an object's programs and maps"),
		pass("verify OBJ [--prog NAME]", "load a program into the kernel's verifier and print its verdict"),
		rtBenchCmd(),
	)
	return cmd
}

func rtBenchCmd() *cobra.Command {
	var (
		repeat, rounds int
		jsonOut, mdOut string
	)
	cmd := &cobra.Command{
		Use:   "bench",
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
			rows, err := rt.Bench(rt.BenchOptions{Repeat: repeat, Rounds: rounds, Dir: dir})
			if err != nil {
				return err
			}
			fmt.Print(rt.BenchTable(rows, false))
			if jsonOut != "" {
				b, _ := json.MarshalIndent(rows, "", "  ")
				if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
					return err
				}
			}
			if mdOut != "" {
				return os.WriteFile(mdOut, []byte("# fastpath rt bench\n\n"+rt.BenchTable(rows, true)), 0o644)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&repeat, "repeat", 100_000, "runs per measurement")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "measurements per program and engine; the best counts")
	cmd.Flags().StringVar(&jsonOut, "json", "", "write the rows as JSON")
	cmd.Flags().StringVar(&mdOut, "md", "", "write the table as Markdown")
	return cmd
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
