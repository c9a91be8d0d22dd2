package scionlab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/scionproto/scion/pkg/slayers/path"
)

// A duration maps to the smallest ExpTime whose lifetime is at least the
// duration; what no ExpTime can express is refused.
func TestHopExpTime(t *testing.T) {
	cases := map[string]struct {
		d       time.Duration
		want    uint8
		wantErr bool
	}{
		"one unit":             {d: 337500 * time.Millisecond, want: 0},
		"just over one unit":   {d: 337500*time.Millisecond + time.Nanosecond, want: 1},
		"six minutes":          {d: 6 * time.Minute, want: 1},
		"two units":            {d: 675 * time.Second, want: 1},
		"scionproto's default": {d: 6 * time.Hour, want: 63},
		"a day":                {d: 24 * time.Hour, want: 255},
		"just under a day":     {d: 24*time.Hour - time.Nanosecond, want: 255},
		"zero":                 {d: 0, wantErr: true},
		"negative":             {d: -time.Minute, wantErr: true},
		"just under one unit":  {d: 337500*time.Millisecond - time.Nanosecond, wantErr: true},
		"a minute":             {d: time.Minute, wantErr: true},
		"just over a day":      {d: 24*time.Hour + time.Nanosecond, wantErr: true},
		"what one byte can't":  {d: 48 * time.Hour, wantErr: true},
		"six and a half hours": {d: 6*time.Hour + 30*time.Minute, want: 69},
		"one unit in seconds":  {d: 338 * time.Second, want: 1},
		"ten units":            {d: 3375 * time.Second, want: 9},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := HopExpTime(c.d)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--hop-expiry") {
					t.Fatalf("HopExpTime(%s) = %d, %v; want an error naming --hop-expiry", c.d, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("HopExpTime(%s) = %d, want %d", c.d, got, c.want)
			}
			// The smallest that is long enough, by scionproto's own
			// conversion.
			if l := path.ExpTimeToDuration(got); l < c.d {
				t.Fatalf("ExpTime %d lives %s, shorter than %s", got, l, c.d)
			}
			if got > 0 && path.ExpTimeToDuration(got-1) >= c.d {
				t.Fatalf("ExpTime %d is not the smallest: %d lives %s", got, got-1, path.ExpTimeToDuration(got-1))
			}
		})
	}
}

// Each control service is given the policies it loads, under the keys of
// [beaconing.policies], each file of the Type scionproto expects for that
// key and with the MaxExpTime asked for.
func TestBeaconPolicies(t *testing.T) {
	cases := map[string]struct {
		core bool
		want map[string]string // cs.toml key → policy Type
	}{
		"core": {core: true, want: map[string]string{
			"propagation": "Propagation", "core_registration": "CoreSegmentRegistration",
		}},
		"leaf": {core: false, want: map[string]string{
			"propagation": "Propagation", "up_registration": "UpSegmentRegistration", "down_registration": "DownSegmentRegistration",
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ps := beaconPolicies(AS{Core: c.core}, 7)
			for _, p := range ps {
				if err := os.WriteFile(filepath.Join(dir, p.file), []byte(p.body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var cs struct {
				Beaconing struct {
					Policies map[string]string `toml:"policies"`
				} `toml:"beaconing"`
			}
			md, err := toml.Decode(policiesTOML(dir, ps), &cs)
			if err != nil {
				t.Fatal(err)
			}
			if u := md.Undecoded(); len(u) > 0 {
				t.Fatalf("cs.toml has keys outside [beaconing.policies]: %v", u)
			}
			got := cs.Beaconing.Policies
			if len(got) != len(c.want) {
				t.Fatalf("[beaconing.policies] = %v, want the keys of %v", got, c.want)
			}
			for key, typ := range c.want {
				file, ok := got[key]
				if !ok {
					t.Fatalf("[beaconing.policies] has no %s: %v", key, got)
				}
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%s names %s: %v", key, file, err)
				}
				lines := strings.Split(string(b), "\n")
				for _, want := range []string{"Type: " + typ, "MaxExpTime: 7"} {
					if !slices.Contains(lines, want) {
						t.Fatalf("%s:\n%s\nhas no line %q", file, b, want)
					}
				}
			}
		})
	}
}

// The links' MTU is checked before anything is made, and what the topology
// files say is the SCION MTU it leaves, for the AS and for every one of its
// interfaces.
func TestMTU(t *testing.T) {
	cases := map[string]struct {
		mtu     int
		wantErr bool
	}{
		"Ethernet":           {mtu: DefaultMTU},
		"jumbo":              {mtu: 9000},
		"least":              {mtu: 1308},
		"most":               {mtu: 9028},
		"below SCION's 1280": {mtu: 1307, wantErr: true},
		"above the router's": {mtu: 9029, wantErr: true},
		"veth's largest":     {mtu: 65535, wantErr: true},
		"zero":               {mtu: 0, wantErr: true},
		"negative":           {mtu: -1500, wantErr: true},
	}
	as, links, err := Network{Prefix: "fp-tmtu-", Dir: t.TempDir()}.PlanLinks(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckMTU(c.mtu)
			if c.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--mtu") || !strings.Contains(err.Error(), "1308 to 9028") {
					t.Fatalf("CheckMTU(%d) = %v; want an error naming --mtu and the range", c.mtu, err)
				}
				if c.mtu == 0 {
					return // to Up, 0 is DefaultMTU
				}
				// Up refuses it before it looks at or makes anything.
				n := Network{Prefix: "fp-tmtu-", Dir: filepath.Join(t.TempDir(), "scion")}
				if _, err := n.Up(t.Context(), UpOptions{ASes: 3, MTU: c.mtu}); err == nil || !strings.Contains(err.Error(), "--mtu") {
					t.Fatalf("Up with MTU %d: %v; want the --mtu error", c.mtu, err)
				}
				if _, err := os.Stat(n.Dir); !os.IsNotExist(err) {
					t.Fatalf("Up with MTU %d made %s", c.mtu, n.Dir)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := float64(c.mtu - 28)
			for _, a := range as {
				b, err := json.Marshal(topology(a, as, links, c.mtu, "v0.12.0"))
				if err != nil {
					t.Fatal(err)
				}
				var topo struct {
					MTU     float64 `json:"mtu"`
					Routers map[string]struct {
						Interfaces map[string]struct {
							MTU float64 `json:"mtu"`
						} `json:"interfaces"`
					} `json:"border_routers"`
				}
				if err := json.Unmarshal(b, &topo); err != nil {
					t.Fatal(err)
				}
				if topo.MTU != want {
					t.Fatalf("%s: the AS's mtu is %v, want %v", a.IA, topo.MTU, want)
				}
				ifs := 0
				for _, r := range topo.Routers {
					for id, i := range r.Interfaces {
						ifs++
						if i.MTU != want {
							t.Fatalf("%s: interface %s's mtu is %v, want %v", a.IA, id, i.MTU, want)
						}
					}
				}
				if wantIfs := map[bool]int{true: 4, false: 2}[a.Core]; ifs != wantIfs {
					t.Fatalf("%s: %d interfaces in topology.json, want %d", a.IA, ifs, wantIfs)
				}
			}
		})
	}
}

// Two prefixes never share a directory by default.
func TestDirFor(t *testing.T) {
	if got := DirFor(DefaultPrefix); got != DefaultDir {
		t.Fatalf("DirFor(%q) = %q; want %q", DefaultPrefix, got, DefaultDir)
	}
	for _, p := range []string{"fp-x-", "../etc", "a/b-"} {
		got := DirFor(p)
		if got == DefaultDir || filepath.Dir(got) != filepath.Dir(DefaultDir) {
			t.Errorf("DirFor(%q) = %q; want a directory of its own beside %s", p, got, DefaultDir)
		}
	}
	if DirFor("fp-x-") == DirFor("fp-y-") {
		t.Error("two prefixes share a directory")
	}
}

// Up in a directory whose record is a live network of another prefix
// refuses, and leaves that network's record as it was.
func TestUpSparesAnotherPrefixsNetwork(t *testing.T) {
	dir := t.TempDir()
	other := Network{Prefix: "fp-other-", Dir: dir}
	st, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live := &State{Prefix: other.Prefix, ASes: 3, Procs: []Proc{{Name: "this test", PID: os.Getpid(), Start: st}}}
	if err := other.writeState(live); err != nil {
		t.Fatal(err)
	}
	n := Network{Prefix: "fp-tup-", Dir: dir}
	_, err = n.Up(t.Context(), UpOptions{ASes: 3})
	if err == nil || !strings.Contains(err.Error(), `"fp-other-"`) || !strings.Contains(err.Error(), "--dir") {
		t.Fatalf("Up over another prefix's live network = %v; want a refusal naming it and --dir", err)
	}
	if got, err := other.readState(); err != nil || got == nil || got.Prefix != other.Prefix {
		t.Fatalf("the other network's record after the refusal: %+v, %v", got, err)
	}
}
