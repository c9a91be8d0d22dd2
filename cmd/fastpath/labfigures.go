package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
		Short: "write the figures page (docs/figures.md) and its plots (docs/figures/*.png) from the reports in a results directory",
		Long: `figures reads every report the lab wrote to a results directory (the JSON of lab bench, lab tcp and
lab tra, and the text of lab scion check) and writes one Markdown page of all their rows, grouped by network
function, each table with the date, machine, commit and command that measured it. A field a report does not
record reads "unknown". The page is replaced whole, or not at all.

It also draws each function's rows as ratios to their anchor (the border router by frame size against
xdp-redirect, the firewall by number of rules against routed, the translator against plain IPv6, a soak's
timeline if results hold one) as PNGs in a directory beside the page named after it (docs/figures/ for
docs/figures.md), and embeds them in the page; other PNGs in that directory are removed. With --out - it
prints the page without plots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			page, err := lab.ReadFigures(results)
			if err != nil {
				return err
			}
			generatedBy := fmt.Sprintf("fastpath lab figures --results %s --out %s", results, out)
			if out == "-" {
				// No page on disk: no place for its images either.
				_, err := os.Stdout.WriteString(page.Markdown(generatedBy))
				return err
			}
			// The plots go beside the page, in a directory named after
			// it (docs/figures.md: docs/figures/), written before the
			// page that shows them.
			imageDir := strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
			dir := filepath.Join(filepath.Dir(out), imageDir)
			if len(page.Plots) > 0 {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
			}
			for i := range page.Plots {
				pl := &page.Plots[i]
				var b bytes.Buffer
				if err := pl.WritePNG(&b); err != nil {
					return fmt.Errorf("plot %s: %w", pl.File, err)
				}
				if err := writeFileAtomic(filepath.Join(dir, pl.File), b.Bytes()); err != nil {
					return err
				}
			}
			// The directory is the page's alone: a PNG of a plot this run
			// did not draw (a soak's, after results lost it) would be
			// one the page no longer shows.
			old, _ := filepath.Glob(filepath.Join(dir, "*.png"))
			for _, f := range old {
				if !slices.ContainsFunc(page.Plots, func(pl lab.Plot) bool { return pl.File == filepath.Base(f) }) {
					if err := os.Remove(f); err != nil {
						return err
					}
				}
			}
			page.ImageDir = imageDir
			if err := writeFileAtomic(out, []byte(page.Markdown(generatedBy))); err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d tables from %s; %d plots in %s\n", out, len(page.Tables), results, len(page.Plots), dir)
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
