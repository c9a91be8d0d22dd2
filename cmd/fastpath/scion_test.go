package main

import (
	"context"
	"strings"
	"testing"
)

// `lab scion` refuses what it cannot do before it reads or changes any
// network: the --dir given holds none.
func TestScionBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		args []string
		want string
	}{
		"hop expiry too short":     {[]string{"up", "--hop-expiry", "5m"}, "--hop-expiry 5m0s: a hop field lives from 5m37.5s (ExpTime 0) to 24h0m0s"},
		"hop expiry too long":      {[]string{"up", "--hop-expiry", "25h"}, "--hop-expiry 25h0m0s"},
		"MTU too small":            {[]string{"up", "--mtu", "1000"}, "--mtu 1000: the links' MTU must be 1308 to 9028 bytes"},
		"MTU too large":            {[]string{"up", "--mtu", "9100"}, "--mtu 9100: the links' MTU must be 1308 to 9028 bytes"},
		"unknown device kind":      {[]string{"up", "--devices", "vlan"}, `--devices "vlan": "vlan" has no device kind "vlan"`},
		"devices of no AS":         {[]string{"up", "--devices", "1-64599=bridge"}, "--devices 1-64599=bridge: the network has no AS 1-64599"},
		"unknown service":          {[]string{"restart", "1-64513", "dispatcher"}, `service "dispatcher": restart one of router, control, daemon`},
		"restart one arg":          {[]string{"restart", "1-64513"}, "accepts 2 arg(s)"},
		"interface not a number":   {[]string{"link", "1-64513", "if1", "down"}, `interface "if1": give the AS's SCION interface ID`},
		"interface zero":           {[]string{"link", "1-64513", "0", "down"}, `interface "0"`},
		"link neither up nor down": {[]string{"link", "1-64513", "1", "off"}, `"off": say up or down`},
		"no network":               {[]string{"link", "1-64513", "1", "down"}, "not up"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lab", "scion", "--prefix", "fp-tcli-", "--dir", dir}, c.args...)
			cmd := rootCmd()
			cmd.SetArgs(args)
			cmd.SetOut(new(strings.Builder))
			cmd.SetErr(new(strings.Builder))
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("fastpath %s: error %v, want one containing %q", strings.Join(args, " "), err, c.want)
			}
		})
	}
}
