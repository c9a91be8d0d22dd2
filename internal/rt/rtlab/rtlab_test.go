package rtlab

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// TestDetail: with --profile-stages in FASTPATH_RT_ARGS, an rt row's detail
// is fastpath-rt's summary, taken once however often it is asked for, and
// its note names the stages that took 5% of the work or more.
func TestDetail(t *testing.T) {
	tb := lab.Testbed{Prefix: "fp-unit-"}
	summary := `{"packets":3,"profile":{"frames":3,"busy_ns_per_frame":1200.4,"stages":[` +
		`{"stage":"wait","ns_per_frame":9000,"share_of_busy":0},` +
		`{"stage":"prog","ns_per_frame":60,"share_of_busy":0.05},` +
		`{"stage":"rx","ns_per_frame":12,"share_of_busy":0.01},` +
		`{"stage":"kick","ns_per_frame":1100,"share_of_busy":0.92}]}}`
	for name, c := range map[string]struct {
		args, note string
		detail     bool
	}{
		"profile":    {"--batch 32 --profile-stages", "fastpath-rt worked 1200 ns a frame over 3 frames (ns: prog 60, kick 1100)", true},
		"no profile": {"--batch 32", "", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(ArgsEnv, c.args)
			stops := 0
			instances[tb.Prefix] = &instance{stop: func() error { stops++; return nil }, out: bytes.NewBufferString(summary + "\n")}
			defer delete(instances, tb.Prefix)
			for range 2 {
				d, err := detail(tb)
				if err != nil {
					t.Fatal(err)
				}
				if c.detail != (d != nil) || (d != nil && !json.Valid(d)) {
					t.Fatalf("detail %q", d)
				}
			}
			note, err := describe(tb)
			if err != nil || note != c.note {
				t.Fatalf("note %q (%v), want %q", note, err, c.note)
			}
			if want := map[bool]int{true: 1, false: 0}[c.detail]; stops != want {
				t.Fatalf("stopped %d times, want %d", stops, want)
			}
		})
	}
}
