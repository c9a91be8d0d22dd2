package main

import (
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// Every anchor names a scenario the binary has: a renamed scenario would
// otherwise lose its rows' anchor ratios without a word.
func TestLabAnchorsNameScenarios(t *testing.T) {
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
}
