// Command fastpath is the control plane and lab of fastpath's XDP network
// functions. This file wires the command tree; the work is in internal/.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/obs"

	// Each network function's lab rows register themselves with the lab.
	_ "github.com/fastpath-dev/fastpath/internal/br/brlab"
	_ "github.com/fastpath-dev/fastpath/internal/fw/fwlab"
	_ "github.com/fastpath-dev/fastpath/internal/rt/rtlab"
)

func main() {
	closeInheritedOnExec()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fastpath:", err)
		os.Exit(1)
	}
}

// closeInheritedOnExec keeps what fastpath was handed beyond stdin, stdout
// and stderr from the processes it starts: `flock LOCK fastpath lab ...
// --keep` would otherwise leave the lock held by the SCION network's
// services for as long as they run.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

func rootCmd() *cobra.Command {
	// Every command's own PersistentPreRun (fw's) runs after the root's,
	// which sets up the logs.
	cobra.EnableTraverseRunHooks = true
	var logs obs.LogOptions
	root := &cobra.Command{
		Use:           "fastpath",
		Short:         "eBPF fast path for network functions, and the lab that measures them",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			b := binaryBuild()
			obs.SetBuild(obs.Build{Version: b.Version, Commit: b.Commit})
			l, err := obs.NewLogger(os.Stderr, logs)
			if err != nil {
				return err
			}
			slog.SetDefault(l)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logs.Level, "log-level", "info", "least level logged: "+strings.Join(obs.LogLevels, ", "))
	root.PersistentFlags().StringVar(&logs.Format, "log-format", "auto", "logs as "+strings.Join(obs.LogFormats, ", ")+" (auto: text on a terminal, journald's form under systemd, else JSON)")
	root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(obs.LogLevels, cobra.ShellCompDirectiveNoFileComp))
	root.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(obs.LogFormats, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(labCmd(), brCmd(), fwCmd(), rtCmd(), traCmd(), monitorCmd(), versionCmd(), manCmd())
	return root
}
