package main

// The grammar every function's commands share: --name selects an instance,
// --mode says how XDP attaches, --json prints what a read command shows as
// JSON. The old spellings keep working for now, each with one line on
// stderr that names the new one.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Values of --mode and of the configurations' xdp_mode.
const (
	// modeAuto attaches in native mode, and in generic mode with a warning
	// on a device whose driver has no native XDP.
	modeAuto = "auto"
	// modeNative attaches in native mode or fails.
	modeNative = string(xdp.Native)
	// modeGeneric attaches in generic (skb) mode.
	modeGeneric = string(xdp.Generic)
)

var attachModes = []string{modeAuto, modeNative, modeGeneric}

// modeUsage is --mode's help, with what the default is.
func modeUsage(def string) string {
	return "XDP mode: auto (native, and generic with a warning where a driver has no native XDP), native (no fallback) or generic; default " + def
}

// registerMode adds --mode, and --generic and --no-fallback as deprecated
// spellings of it, to a command that attaches.
func registerMode(cmd *cobra.Command, mode *string, def, defWords string) {
	f := cmd.Flags()
	f.StringVar(mode, "mode", def, modeUsage(defWords))
	f.Bool("no-fallback", false, "fail instead of falling back to generic XDP")
	f.Bool("generic", false, "attach in generic (skb) mode")
	f.MarkDeprecated("no-fallback", "use --mode native")
	f.MarkDeprecated("generic", "use --mode generic")
	cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(attachModes, cobra.ShellCompDirectiveNoFileComp))
}

// modeOf is the mode a command was given: --mode, else a deprecated
// --generic or --no-fallback, else "" when the flag's default is "".
func modeOf(cmd *cobra.Command, mode string) (string, error) {
	f := cmd.Flags()
	generic, _ := f.GetBool("generic")
	noFallback, _ := f.GetBool("no-fallback")
	if f.Changed("mode") && (generic || noFallback) {
		return "", fmt.Errorf("--mode %s: --generic and --no-fallback are its old spellings; give --mode alone", mode)
	}
	switch {
	case generic && noFallback:
		return "", fmt.Errorf("--generic and --no-fallback: say --mode generic or --mode native")
	case generic:
		mode = modeGeneric
	case noFallback:
		mode = modeNative
	}
	if mode != "" && !slices.Contains(attachModes, mode) {
		return "", fmt.Errorf("unknown XDP mode %q (--mode): use auto, native or generic", mode)
	}
	return mode, nil
}

// xdpAttach is how a mode attaches: the mode tried first, and whether
// falling back to generic mode is forbidden.
func xdpAttach(mode string) (m xdp.Mode, noFallback bool) {
	switch mode {
	case modeGeneric:
		return xdp.Generic, false
	case modeNative:
		return xdp.Native, true
	}
	return xdp.Native, false
}

// registerName adds --name (-n) to a command that acts on or reads an
// instance, completing the attached ones.
func registerName(cmd *cobra.Command, name *string, def, usage string, attached func() ([]string, error)) {
	cmd.Flags().StringVarP(name, "name", "n", def, usage)
	cmd.RegisterFlagCompletionFunc("name", completeInstances(attached))
}

// completeInstances completes the names of the attached instances.
func completeInstances(attached func() ([]string, error)) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		names, err := attached()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeDevices completes device names, in the namespace of --netns if
// the command has it and it is given.
func completeDevices(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ns, _ := cmd.Flags().GetString("netns")
	devs, err := xdp.Devices(ns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// pickInstance is the instance a command reads or acts on: the one named,
// else the only one attached. Several attached and none named is an error
// that lists them; so is none attached.
func pickInstance(name, what, attachHint string, attached func() ([]string, error)) (string, error) {
	if name != "" {
		return name, nil
	}
	names, err := attached()
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("no %s is attached (%s)", what, attachHint)
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("%d %ss are attached (%s): name one with --name", len(names), what, strings.Join(names, ", "))
}

// deprecatedForm says, in one line on stderr, that a command line of an
// old form works for now and what to write instead.
func deprecatedForm(cmd *cobra.Command, old, instead string) {
	fmt.Fprintf(cmd.ErrOrStderr(), "fastpath: %q is deprecated and will go: write %q\n", old, instead)
}

// oldPositionalName takes the instance named as the first argument, in
// the old form, when --name is not given: it warns and returns the name
// and the arguments after it.
func oldPositionalName(cmd *cobra.Command, name string, args []string, newForm func(name string) string) (string, []string, error) {
	if len(args) == 0 {
		return name, args, nil
	}
	if name != "" {
		return "", nil, fmt.Errorf("%s and --name %s: name the instance once, with --name", args[0], name)
	}
	deprecatedForm(cmd, cmd.CommandPath()+" "+strings.Join(args, " "), newForm(args[0]))
	return args[0], args[1:], nil
}

// noJSON is the annotation of a command whose name says it reads (list,
// stats, check, …) but that has no --json, with the reason: the CLI's test
// holds every other such command to having one.
const noJSON = "fastpath/no-json"
