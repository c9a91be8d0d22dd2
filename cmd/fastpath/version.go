package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// Set by the Makefile (-ldflags -X main.version=... ): the release from
// `git describe`, the commit, and when it was built. A `go install` build
// has none of them, and takes what the Go toolchain recorded instead.
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what `fastpath version` says of the binary and the machine.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Date    string `json:"date,omitempty"`
	// CommitDate is the commit's time, as the Go toolchain recorded it:
	// what a build without the Makefile's date says.
	CommitDate string         `json:"commit_date,omitempty"`
	Modified   bool           `json:"modified,omitempty"`
	Go         string         `json:"go"`
	Kernel     string         `json:"kernel"`
	Functions  []functionInfo `json:"functions"`
}

// functionInfo says whether this machine offers what a function needs.
type functionInfo struct {
	Name      preflight.Function `json:"name"`
	MinKernel string             `json:"min_kernel"`
	// Ready: nothing required is missing (features the probes could not
	// tell about aside: see Unknown).
	Ready    bool               `json:"ready"`
	Missing  []preflight.Status `json:"missing,omitempty"`
	Optional []preflight.Status `json:"optional_missing,omitempty"`
	Unknown  []preflight.Status `json:"unknown,omitempty"`
}

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "the version, commit and build of fastpath, and whether this kernel has what each function needs",
		Long: `Prints fastpath's version, commit, build date and Go version, the kernel release,
and for each network function (br, fw, tra, rt) whether this kernel has every helper,
kfunc, map, program and link type its programs need, naming what is missing and the
release that has it. The probes load tiny programs: run as root for a full answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := collectBuildInfo(preflight.KernelProbes())
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			printBuildInfo(cmd.OutOrStdout(), info)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func collectBuildInfo(p preflight.Probes) buildInfo {
	info := binaryBuild()
	info.Kernel = preflight.KernelRelease()
	for _, fn := range preflight.Functions {
		fi := functionInfo{Name: fn, MinKernel: preflight.MinKernel(fn), Ready: true}
		for _, s := range p.Check(fn) {
			switch {
			case s.Present:
			case s.Unknown:
				fi.Unknown = append(fi.Unknown, s)
			case s.Optional:
				fi.Optional = append(fi.Optional, s)
			default:
				fi.Missing = append(fi.Missing, s)
				fi.Ready = false
			}
		}
		info.Functions = append(info.Functions, fi)
	}
	return info
}

// binaryBuild is what the binary knows of its own build: the Makefile's
// ldflags, else what the Go toolchain recorded.
func binaryBuild() buildInfo {
	info := buildInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				info.CommitDate = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
		// `go install ...@v1.2.3` records the module's version; a build
		// in a checkout records "(devel)" or a pseudo-version.
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	return info
}

func printBuildInfo(w io.Writer, info buildInfo) {
	fmt.Fprintf(w, "fastpath %s\n", info.Version)
	if info.Commit != "" {
		mod := ""
		if info.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(w, "commit   %s%s\n", info.Commit, mod)
	}
	if info.Date != "" {
		fmt.Fprintf(w, "built    %s\n", info.Date)
	} else if info.CommitDate != "" {
		fmt.Fprintf(w, "of       %s (the commit's date)\n", info.CommitDate)
	}
	fmt.Fprintf(w, "go       %s\n", info.Go)
	fmt.Fprintf(w, "kernel   %s\n", info.Kernel)
	unknown := false
	for _, fi := range info.Functions {
		state := "ready"
		switch {
		case !fi.Ready:
			state = "missing what it needs"
		case len(fi.Unknown) > 0:
			state = "not fully probed"
			unknown = true
		}
		fmt.Fprintf(w, "%-4s     %s (needs Linux %s)\n", fi.Name, state, fi.MinKernel)
		for _, s := range fi.Missing {
			fmt.Fprintf(w, "           missing %s %s (Linux %s): %s\n", s.Kind, s.Name, s.Kernel, s.Why)
		}
		for _, s := range fi.Optional {
			fmt.Fprintf(w, "           without %s %s (Linux %s), it lacks: %s\n", s.Kind, s.Name, s.Kernel, s.Why)
		}
		// Unprivileged, every probe fails alike: one line says how many.
		if n := len(fi.Unknown); n > 0 {
			fmt.Fprintf(w, "           could not probe %d of what it needs (%s %s: %s)\n", n, fi.Unknown[0].Kind, fi.Unknown[0].Name, fi.Unknown[0].Err)
		}
	}
	if unknown && os.Geteuid() != 0 {
		fmt.Fprintln(w, "the probes load tiny BPF programs: run `sudo fastpath version` for a full answer")
	}
}
