// Command fastpath is the control plane and lab of fastpath's XDP network
// functions. This file wires the command tree; the work is in internal/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	// Each network function's lab rows register themselves with the lab.
	_ "github.com/fastpath-dev/fastpath/internal/br/brlab"
	_ "github.com/fastpath-dev/fastpath/internal/fw/fwlab"
	_ "github.com/fastpath-dev/fastpath/internal/rt/rtlab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fastpath:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fastpath",
		Short:         "eBPF fast path for network functions, and the lab that measures them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(labCmd(), brCmd(), fwCmd(), rtCmd(), traCmd())
	return root
}
