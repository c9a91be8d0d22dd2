package scionlab

import (
	"slices"
	"strings"
	"testing"
)

// --devices reads rules into the form the record keeps, and refuses what
// names no kind, AS or interface, naming the form it takes.
func TestParseDevices(t *testing.T) {
	cases := map[string]struct {
		in, want string
		kinds    []DeviceKind
		err      string
	}{
		"empty is veth":           {in: "", want: "veth", kinds: []DeviceKind{Veth}},
		"one kind":                {in: "bridge", want: "bridge", kinds: []DeviceKind{Bridge}},
		"one end behind a bridge": {in: "veth, 1-64512#2=bridge", want: "veth,1-64512#2=bridge", kinds: []DeviceKind{Veth, Bridge}},
		"one AS":                  {in: "1-64513=macvlan", want: "1-64513=macvlan", kinds: []DeviceKind{Macvlan}},
		"an internal network":     {in: "1-64513#internal=vxlan", want: "1-64513#internal=vxlan", kinds: []DeviceKind{VXLAN}},
		"a .topo AS":              {in: "macvlan,1-ff00:0:110#3=vxlan", want: "macvlan,1-ff00:0:110#3=vxlan", kinds: []DeviceKind{Macvlan, VXLAN}},
		"no such kind":            {in: "ethernet", err: `"ethernet" has no device kind "ethernet"`},
		"VLAN":                    {in: "vlan", err: "veth, bridge, macvlan, vxlan"},
		"an end without kind":     {in: "1-64512#2", err: `has no device kind "1-64512#2"`},
		"not an AS":               {in: "core=bridge", err: `names no AS ("core"`},
		"wildcard AS":             {in: "1-0=bridge", err: "names no AS"},
		"not an interface":        {in: "1-64512#if2=bridge", err: `names no interface ("if2"`},
		"interface zero":          {in: "1-64512#0=bridge", err: `names no interface ("0"`},
		"a kind of no name":       {in: "1-64512#2=", err: `has no device kind ""`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := ParseDevices(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--devices") {
					t.Fatalf("ParseDevices(%q) = %v, %v; want an error naming --devices and containing %q", c.in, d, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.String() != c.want || !slices.Equal(d.Kinds(), c.kinds) {
				t.Fatalf("ParseDevices(%q) = %q of kinds %v, want %q of %v", c.in, d, d.Kinds(), c.want, c.kinds)
			}
			again, err := ParseDevices(d.String())
			if err != nil || again.String() != d.String() {
				t.Fatalf("%q read again: %q, %v", d, again, err)
			}
		})
	}
}

// Rules that name what the network lacks, or a link VXLAN at one end only,
// are refused before anything is made.
func TestDevicesRefused(t *testing.T) {
	n := Network{Prefix: "fp-x-", Dir: "/nowhere"}
	cases := map[string]struct{ devices, err string }{
		"no such AS":                {"1-64599=bridge", "the network has no AS 1-64599 (it has 1-64512 to 1-64514)"},
		"no such interface":         {"1-64512#7=bridge", "1-64512 has no interface 7: its interfaces are 1, 2"},
		"VXLAN at one end only":     {"vxlan,1-64514#1=bridge", "the link 1-64512#2–1-64514#1 would be vxlan at one end and bridge at the other"},
		"VXLAN against an AS's say": {"1-64512=vxlan,1-64513=macvlan", "the link 1-64512#1–1-64513#1 would be vxlan at one end and macvlan at the other"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			as, links, err := n.Plan(3)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseDevices(c.devices)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Apply(as, links); err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--devices") {
				t.Fatalf("Apply(%s) = %v, want an error naming --devices and containing %q", c.devices, err, c.err)
			}
		})
	}
}
