package scionlab

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// down refuses a directory up did not make, before it stops or removes
// anything: a --dir given by mistake keeps its files.
func TestDownRefusesADirectoryItDidNotMake(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := Network{Prefix: "fp-tdown-", Dir: dir}
	err := n.Down(io.Discard)
	if err == nil || !strings.Contains(err.Error(), dir+" was not made by fastpath lab scion up (it has no "+markerName+")") {
		t.Fatalf("down of a directory up did not make: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("down touched a directory it refused: %v", err)
	}
	// The marker up writes, or the record of an older up, makes it ours.
	for _, f := range []string{markerName, "state.json"} {
		mine := t.TempDir()
		os.WriteFile(filepath.Join(mine, "logs"), nil, 0o644)
		os.WriteFile(filepath.Join(mine, f), []byte("{}"), 0o644)
		if err := (Network{Prefix: "fp-tdown-", Dir: mine}).checkOwnDir(); err != nil {
			t.Errorf("a directory with %s: %v", f, err)
		}
	}
	// An empty or missing directory holds nothing to lose.
	for _, d := range []string{t.TempDir(), filepath.Join(dir, "none")} {
		if err := (Network{Prefix: "fp-tdown-", Dir: d}).checkOwnDir(); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}
