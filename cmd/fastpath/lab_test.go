package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// Every anchor and every row of a committed record names a scenario the
// binary has: a renamed scenario would otherwise lose its anchor ratio, or
// its record, without a word.
func TestLabAnchorsAndRecordsNameScenarios(t *testing.T) {
	for _, s := range lab.Scenarios() {
		if s.Anchor == "" {
			continue
		}
		if s.Anchor == s.Name {
			t.Errorf("scenario %s is its own anchor", s.Name)
		}
		if _, err := lab.LookupScenarios([]string{s.Anchor}); err != nil {
			t.Errorf("scenario %s: anchor: %v", s.Name, err)
		}
	}
	files, err := filepath.Glob(filepath.Join("..", "..", lab.RecordDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no record in %s: %v", lab.RecordDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := lab.ParseRecord(f, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rec.Rows {
			if _, err := lab.LookupScenarios([]string{e.Scenario}); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			for _, other := range []string{e.Anchor, e.Baseline} {
				if other == "" {
					continue
				}
				if _, err := lab.LookupScenarios([]string{other}); err != nil {
					t.Errorf("%s: %s: %v", f, e.Scenario, err)
				}
			}
		}
	}
}
