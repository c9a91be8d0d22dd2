package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// labFiguresCmd prints the figures page: every row of the reports make demo
// leaves in results/, one table per report and function, as the one page
// the docs link to for figures.
func labFiguresCmd() *cobra.Command {
	var results, out string
	cmd := &cobra.Command{
		Use:   "figures [--results DIR] [--out FILE]",
		Short: "write the figures page (docs/figures.md) from the reports in a results directory",
		Long: `figures reads every report the lab wrote to a results directory (the JSON of lab bench, lab tcp and
lab tra, and the text of lab scion check) and writes one Markdown page of all their rows, grouped by network
function, each table with the date, machine, commit and command that measured it. A field a report does not
record reads "unknown". The page is replaced whole, or not at all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			page, err := lab.ReadFigures(results)
			if err != nil {
				return err
			}
			md := page.Markdown(fmt.Sprintf("fastpath lab figures --results %s --out %s", results, out))
			if out == "-" {
				_, err := os.Stdout.WriteString(md)
				return err
			}
			if err := writeFileAtomic(out, []byte(md)); err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d tables from %s\n", out, len(page.Tables), results)
			for _, name := range page.Skipped {
				fmt.Fprintf(os.Stderr, "not on the page: %s (not a report of lab bench, lab tcp, lab tra or lab scion check)\n", filepath.Join(results, name))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&results, "results", "results", "directory of the reports (make demo writes results/)")
	cmd.Flags().StringVar(&out, "out", "docs/figures.md", "page to write; - prints it")
	return cmd
}

// writeFileAtomic replaces path with data in one rename, so that a reader
// never sees half a page.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
