package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// readCommands are the names of commands that read and print state: each
// has a --json switch, or says why not (the noJSON annotation).
var readCommands = []string{"list", "stats", "watch", "paths", "check", "show", "status", "rules", "list-blocked", "top"}

// instanceFunctions are the functions whose commands select an instance
// with --name (-n).
var instanceFunctions = []string{"br", "fw", "tra"}

// allCommands is the whole tree, with cobra's own help and completion
// commands, as fastpath runs it.
func allCommands() []*cobra.Command {
	root := rootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var out []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		out = append(out, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// path is a command's words after "fastpath".
func path(c *cobra.Command) []string { return strings.Fields(c.CommandPath())[1:] }

// Every command answers --help with its usage and success, also those
// fastpath hands to fastpath-rt.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range allCommands() {
		args := append(path(c), "--help")
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			root := rootCmd()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(args)
			if err := root.ExecuteContext(context.Background()); err != nil {
				t.Fatalf("fastpath %s: %v\n%s", strings.Join(args, " "), err, out.String())
			}
			if !strings.Contains(out.String(), "Usage:") {
				t.Fatalf("fastpath %s prints no usage:\n%s", strings.Join(args, " "), out.String())
			}
		})
	}
}

var flagInUse = regexp.MustCompile(`(^|[\s\[|])--([a-z0-9][a-z0-9-]*)`)

// useFlags are the flags a Use string names, each with whether it is
// inside an optional [...] group.
func useFlags(use string) map[string]bool {
	out := map[string]bool{}
	for _, m := range flagInUse.FindAllStringSubmatchIndex(use, -1) {
		name := use[m[4]:m[5]]
		depth := strings.Count(use[:m[4]], "[") - strings.Count(use[:m[4]], "]")
		optional := depth > 0
		if was, ok := out[name]; ok {
			optional = optional && was
		}
		out[name] = optional
	}
	return out
}

// required says a flag must be given: marked so for cobra, or its usage
// says "(required)".
func required(f *pflag.Flag) bool {
	if _, ok := f.Annotations[cobra.BashCompOneRequiredFlag]; ok {
		return true
	}
	return strings.Contains(f.Usage, "(required)")
}

// positionals counts the positional placeholders of a Use string: those
// that must be given, those that may, and whether the last repeats. A word
// after a flag is its value, unless the flag closed its [...] group.
func positionals(use string) (min, max int, variadic bool) {
	depth := 0
	value := false
	for _, w := range strings.Fields(use)[1:] {
		optional := depth > 0 || strings.HasPrefix(w, "[")
		depth += strings.Count(w, "[") - strings.Count(w, "]")
		bare := strings.Trim(w, "[]")
		switch {
		case strings.HasPrefix(bare, "-"):
			value = !strings.HasSuffix(w, "]")
			continue
		case value && !strings.HasPrefix(w, "["):
			value = false
			continue
		case bare == "|" || bare == "":
			continue
		}
		value = false
		variadic = variadic || strings.HasSuffix(bare, "...")
		max++
		if !optional {
			min++
		}
	}
	return min, max, variadic
}

// accepts lists the numbers of arguments, 0 to 5, that a command's Args
// validator takes.
func accepts(c *cobra.Command) []int {
	var out []int
	for n := range 6 {
		if c.Args(c, make([]string, n)) == nil {
			out = append(out, n)
		}
	}
	return out
}

// The usage lines say what the code does: every flag a Use names exists,
// every required flag is named outside [...], the placeholders agree with
// the Args validator, read commands have --json (a switch: a file is
// --json-file), and --name is -n wherever a function selects an instance.
func TestUsageIsTrueToTheCode(t *testing.T) {
	for _, c := range allCommands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Parent() != nil && c.Parent().Name() == "completion" {
			continue
		}
		name := c.CommandPath()
		flags := c.Flags()
		lookup := func(n string) *pflag.Flag {
			if f := flags.Lookup(n); f != nil {
				return f
			}
			return c.InheritedFlags().Lookup(n)
		}
		named := useFlags(c.Use)
		for f := range named {
			if c.DisableFlagParsing {
				continue // checked against fastpath-rt below
			}
			if lookup(f) == nil {
				t.Errorf("%s: Use %q names --%s, which the command does not have", name, c.Use, f)
			}
		}
		flags.VisitAll(func(f *pflag.Flag) {
			if !required(f) {
				return
			}
			if optional, ok := named[f.Name]; !ok || optional {
				t.Errorf("%s: --%s is required but Use %q does not name it outside [...]", name, f.Name, c.Use)
			}
		})
		if c.Args != nil && c.Runnable() && !c.DisableFlagParsing {
			min, max, variadic := positionals(c.Use)
			ok := accepts(c)
			if !slices.Contains(ok, min) || min > 0 && slices.Contains(ok, min-1) {
				t.Errorf("%s: Use %q asks for at least %d arguments; the validator takes %v", name, c.Use, min, ok)
			}
			if len(ok) == 1 && (variadic || max != min) {
				t.Errorf("%s: the validator takes exactly %d arguments; Use %q says %d to %d (repeating: %v)", name, ok[0], c.Use, min, max, variadic)
			}
			if !variadic && len(ok) > 0 && ok[len(ok)-1] == 5 {
				t.Errorf("%s: the validator takes any number of arguments; Use %q says at most %d", name, c.Use, max)
			}
		}
		if slices.Contains(readCommands, c.Name()) && c.Annotations[noJSON] == "" {
			if f := flags.Lookup("json"); f == nil || f.Value.Type() != "bool" {
				t.Errorf("%s reads state but has no --json switch (or give it the %s annotation, with the reason)", name, noJSON)
			}
		}
		if f := flags.Lookup("json"); f != nil && f.Value.Type() != "bool" && f.Deprecated == "" {
			t.Errorf("%s: --json takes a %s: --json is a switch that prints JSON; a file is --json-file FILE", name, f.Value.Type())
		}
		if p := path(c); len(p) > 1 && slices.Contains(instanceFunctions, p[0]) {
			if f := lookup("name"); f != nil && f.Shorthand != "n" {
				t.Errorf("%s: --name has no -n", name)
			}
		}
		if f := flags.Lookup("mode"); f != nil && f.Deprecated == "" {
			values, _ := c.GetFlagCompletionFunc("mode")
			if values == nil {
				t.Errorf("%s: --mode completes nothing", name)
			} else if got, _ := values(c, nil, ""); len(got) < 2 {
				t.Errorf("%s: --mode completes %v", name, got)
			}
		}
	}
}

// The help of a command handed to fastpath-rt lists flags fastpath-rt
// parses (runtime/src/main.rs), and --mode, which fastpath translates.
func TestRtHelpListsRuntimeFlags(t *testing.T) {
	src, err := os.ReadFile("../../runtime/src/main.rs")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`(?m)^\s+(--?[a-z][a-z-]*)\s`)
	for _, p := range rtPassThrough {
		c := p.command()
		help := p.help(c)
		for _, m := range flag.FindAllStringSubmatch(help, -1) {
			f := m[1]
			if f == "--mode" || f == "-h" {
				continue
			}
			if !strings.Contains(string(src), `"`+f+`" =>`) {
				t.Errorf("rt %s --help lists %s, which fastpath-rt does not parse", c.Name(), f)
			}
		}
		for f := range useFlags(p.use) {
			if !strings.Contains(help, "--"+f+" ") {
				t.Errorf("rt %s: Use names --%s, its help does not list it", c.Name(), f)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dev", "eth0", "--mode", "generic", "x.o"}, []string{"--dev", "eth0", "--generic", "x.o"}},
		{[]string{"--mode=native", "--dev", "eth0"}, []string{"--dev", "eth0"}},
	} {
		got, err := rtModeArgs(rootCmd(), c.args)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("rt --mode: %q became %q, %v; want %q", c.args, got, err, c.want)
		}
	}
}

// The old spellings still work, each with one line on stderr that names
// the new form.
func TestOldFormsWarn(t *testing.T) {
	cases := map[string]struct {
		args    []string
		warning string
	}{
		"br stats BR":      {[]string{"br", "stats", "fp-tcli-none"}, `write "fastpath br stats --name fp-tcli-none"`},
		"tra stats NAME":   {[]string{"tra", "stats", "fp-tcli-none"}, `write "fastpath tra stats --name fp-tcli-none"`},
		"br detach router": {[]string{"br", "detach", "--router", "fp-tcli-none"}, "Flag --router has been deprecated, use --name"},
		"lab bench --json": {[]string{"lab", "bench", "--json", "x.json", "--list"}, "Flag --json has been deprecated, use --json-file FILE"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			root := rootCmd()
			var errOut bytes.Buffer
			root.SetErr(&errOut)
			root.SetOut(&errOut)
			root.SetArgs(c.args)
			root.ExecuteContext(context.Background())
			if got := errOut.String(); !strings.Contains(got, c.warning) || strings.Count(got, "deprecated") != 1 {
				t.Fatalf("fastpath %s: stderr %q, want one line with %q", strings.Join(c.args, " "), got, c.warning)
			}
		})
	}
}

// br key add reads the key from a file or stdin, as base64 or raw bytes,
// and never from the command line.
func TestReadKey(t *testing.T) {
	key := []byte("0123456789abcdef")
	dir := t.TempDir()
	b64 := dir + "/b64"
	raw := dir + "/raw"
	os.WriteFile(b64, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), 0o600)
	os.WriteFile(raw, key, 0o600)
	for _, c := range []struct {
		path  string
		stdin string
	}{{b64, ""}, {raw, ""}, {"-", "MDEyMzQ1Njc4OWFiY2RlZg=="}} {
		got, err := readKey(c.path, strings.NewReader(c.stdin))
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("key from %s: %q, %v", c.path, got, err)
		}
	}
	if _, err := readKey("-", strings.NewReader("c2hvcnQ=")); err == nil || !strings.Contains(err.Error(), "--key-file stdin: want the base64 of 16 bytes") {
		t.Errorf("a short key from stdin: %v", err)
	}
}

// Several instances attached and none named: the error lists them.
func TestPickInstance(t *testing.T) {
	several := func() ([]string, error) { return []string{"a", "b"}, nil }
	one := func() ([]string, error) { return []string{"a"}, nil }
	none := func() ([]string, error) { return nil, nil }
	if got, err := pickInstance("", "router", "fastpath br attach", one); got != "a" || err != nil {
		t.Errorf("the only one: %q, %v", got, err)
	}
	if got, err := pickInstance("b", "router", "fastpath br attach", several); got != "b" || err != nil {
		t.Errorf("the one named: %q, %v", got, err)
	}
	if _, err := pickInstance("", "router", "fastpath br attach", several); err == nil || err.Error() != "2 routers are attached (a, b): name one with --name" {
		t.Errorf("several: %v", err)
	}
	if _, err := pickInstance("", "router", "fastpath br attach", none); err == nil || err.Error() != "no router is attached (fastpath br attach)" {
		t.Errorf("none: %v", err)
	}
}

// fastpath man writes a page per command.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	root := rootCmd()
	root.SetOut(new(bytes.Buffer))
	root.SetArgs([]string{"man", dir})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"fastpath.8", "fastpath-br-attach.8", "fastpath-fw-rules.8", "fastpath-tra-list.8", "fastpath-rt-run.8"} {
		b, err := os.ReadFile(dir + "/" + page)
		if err != nil {
			t.Errorf("man: %v", err)
			continue
		}
		if !bytes.Contains(b, []byte(".TH \"FASTPATH\"")) {
			t.Errorf("%s is no man page:\n%s", page, b)
		}
	}
}
