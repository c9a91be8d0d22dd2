package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// lab figures writes the page and its plots beside it, embeds every plot
// it wrote, and removes a PNG of a plot it no longer draws.
func TestLabFiguresWritesPlots(t *testing.T) {
	out := filepath.Join(t.TempDir(), "docs")
	if err := os.MkdirAll(filepath.Join(out, "figures"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(out, "figures", "gone.png")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(out, "figures.md")
	cmd := labFiguresCmd()
	cmd.SetArgs([]string{"--results", filepath.Join("..", "..", "internal", "lab", "testdata", "figures"), "--out", page})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var embedded []string
	for _, m := range regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(string(md), -1) {
		embedded = append(embedded, m[1])
	}
	slices.Sort(embedded)
	var written []string
	files, _ := filepath.Glob(filepath.Join(out, "figures", "*"))
	for _, f := range files {
		written = append(written, "figures/"+filepath.Base(f))
	}
	// testdata holds a lab tra report and a soak's, no lab bench report.
	want := []string{"figures/soak.png", "figures/tra.png"}
	if !slices.Equal(embedded, want) || !slices.Equal(written, want) {
		t.Errorf("embedded %v, written %v; want %v both (the stale PNG removed)", embedded, written, want)
	}
	if !strings.Contains(string(md), "This page is generated: `fastpath lab figures --results") {
		t.Errorf("page does not say how it was made:\n%s", md)
	}
}
