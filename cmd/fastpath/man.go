package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manCmd writes a man page per command, from the command tree itself: the
// pages say what --help says.
func manCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "write the man pages of every command into DIR (section 8: fastpath.8, fastpath-br-attach.8, …)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "FASTPATH", Section: "8", Source: "fastpath", Manual: "fastpath"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages into %s: %w", args[0], err)
			}
			fmt.Printf("man pages written to %s\n", args[0])
			return nil
		},
	}
}
