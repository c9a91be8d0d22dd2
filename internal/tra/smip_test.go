package tra

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// The vectors of scion-cpp's scion2ip in its current format.
func TestSMIPVectors(t *testing.T) {
	for scion, smip := range map[string]string{
		"1-64512,10.128.0.1":       "fc00:10fc::ffff:a80:1",
		"1-64514,fc00:10fc:200::1": "fc00:10fc:200::1",
		"1-2:0:0,10.0.0.1":         "fc00:1e00::ffff:a00:1",
		"1-524287,10.1.2.3":        "fc00:17ff:ff00::ffff:a01:203",
		"1-64512,::1":              "fc00:10fc::1",
		"4095-2:ffff:ffff,::2":     "fcff:feff:ffff:ff00::2",
		"1-0,10.0.0.1":             "fc00:1000::ffff:a00:1",
	} {
		t.Run(scion, func(t *testing.T) {
			ia, host, err := ParseSCION(scion)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FromSCION(ia, host)
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.MustParseAddr(smip); got != want {
				t.Fatalf("SCION → SM-IP: %s, want %s", got, want)
			}
			// And back: the same ISD-AS and host.
			m, err := ToSCION(got)
			if err != nil {
				t.Fatal(err)
			}
			if m.IA != ia || m.Host(got) != host {
				t.Fatalf("SM-IP → SCION: %s,%s, want %s,%s", m.IA, m.Host(got), ia, host)
			}
		})
	}
}

func TestSMIPRefusals(t *testing.T) {
	for in, want := range map[string]string{
		"1-524288,10.0.0.1":             "neither a BGP-style ASN below 524288",
		"1-ff00:0:110,10.0.0.1":         "neither a BGP-style ASN",
		"4096-1,10.0.0.1":               "ISD 4096 is more than",
		"1-64512,fc00:10fc:200::1":      "maps to 1-64514, not 1-64512",
		"1-64512,2001:db8::1":           "must be SCION-mapped itself",
		"1-64512,fc00:1800::ffff:a00:1": "form 0x8 is reserved",
	} {
		t.Run(in, func(t *testing.T) {
			ia, host, err := ParseSCION(in)
			if err == nil {
				_, err = FromSCION(ia, host)
			}
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrNotMappable) && !errors.Is(err, ErrNotSMIP) {
				t.Fatalf("error %v, want one containing %q", err, want)
			}
		})
	}
	for in, want := range map[string]string{
		"fc00:1800::ffff:a00:1": "form 0x8 is reserved",
		"fc00:1f00::1":          "form 0xf is reserved",
		"2001:db8::1":           "not fc00::/8",
		"10.0.0.1":              "not IPv6",
	} {
		t.Run(in, func(t *testing.T) {
			_, err := ToSCION(netip.MustParseAddr(in))
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrNotSMIP) {
				t.Fatalf("error %v, want one containing %q", err, want)
			}
		})
	}
}
