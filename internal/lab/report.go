package lab

import (
	"encoding/json"
	"time"
)

// Report is everything one `lab bench` run measured. The table, the Markdown
// and the plot are all printed from it, and it is what --json writes.
type Report struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	// Commit is the revision the binary was built from ("-dirty" with
	// uncommitted changes); lab bench puts the checkout's HEAD there when
	// the build did not record it (CheckoutCommit); "" when neither is known.
	Commit   string `json:"commit,omitempty"`
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	// Baseline is the scenario every ratio is taken to ("veth"), or "" when it
	// was not part of the run.
	Baseline string `json:"baseline"`
	// Restore says the generator wrote every packet whole on each run (needed
	// when a DUT rewrites frames); otherwise it wrote only the bytes in which
	// the packets differ.
	Restore bool  `json:"restore"`
	Rows    []Row `json:"rows"`
	// CeilingMpps is the generator alone (the ceiling row), and VethOfCeiling
	// the veth row's share of it: what the generator's per-packet work
	// leaves of the testbed's capacity. 0 when a row is missing. With
	// several frame sizes, these are the first size's; the rows have all.
	CeilingMpps   float64 `json:"ceiling_mpps"`
	VethOfCeiling float64 `json:"veth_of_ceiling"`
	// Record is what the rows were compared with (CompareRecord), nil when
	// they were not.
	Record *RecordSummary `json:"record,omitempty"`
}

// Row is one scenario's figures over all its runs.
type Row struct {
	Scenario    string `json:"scenario"`
	Description string `json:"description"`
	// Size is the frame length in bytes without the Ethernet FCS.
	Size int   `json:"size"`
	Runs []Run `json:"runs"`
	// Mpps over the runs: delivered packets per second at the sink, in millions.
	MedianMpps float64 `json:"median_mpps"`
	MinMpps    float64 `json:"min_mpps"`
	MaxMpps    float64 `json:"max_mpps"`
	// NsPerPacket is 1e3 / MedianMpps: the whole path's cost per packet on the
	// one core that generator, device under test and sink share.
	NsPerPacket float64 `json:"ns_per_packet"`
	// Ratio is MedianMpps divided by the baseline row's at the same frame
	// size; 0 without a baseline.
	Ratio float64 `json:"ratio"`
	// RatioOtherSize says the row's frames have a size the baseline did
	// not run at (a real path's packets are as long as the path makes
	// them), so Ratio is to the baseline at the one size it ran.
	RatioOtherSize bool `json:"ratio_other_size,omitempty"`
	// Anchor is the scenario's own comparison (Scenario.Anchor). AnchorMpps
	// is the anchor row's median at the same frame size in the same run, 0
	// when it did not run there, and AnchorRatio MedianMpps over it.
	Anchor      string  `json:"anchor,omitempty"`
	AnchorMpps  float64 `json:"anchor_mpps,omitempty"`
	AnchorRatio float64 `json:"anchor_ratio,omitempty"`
	// Loss is the fraction of sent packets the sink did not count (median).
	Loss float64 `json:"loss"`
	// Note says what limits the figure, e.g. that the path lost packets.
	Note string `json:"note,omitempty"`
	// VsRecord is the row against the machine kind's record, nil when the
	// report was not compared with one.
	VsRecord *Comparison `json:"vs_record,omitempty"`
	// Details are what the DUT reported of itself after each setup's runs
	// (Scenario.Detail), in the order they ran.
	Details []json.RawMessage `json:"details,omitempty"`
	// Generator is how the frames were sent: MethodLiveFrames, or
	// MethodPacket for frames longer than live frames take.
	Generator string `json:"generator,omitempty"`
}

// Run is one generation of a fixed number of packets through a scenario.
type Run struct {
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
	// Seconds is the generator's time from its first packet to its last;
	// WallSeconds the whole send, test-run set-up included.
	Seconds     float64 `json:"seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	// OfferedMpps is what the generator sent per second; Mpps what the sink got.
	OfferedMpps float64 `json:"offered_mpps"`
	Mpps        float64 `json:"mpps"`
}
