package scionlab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// The lab's own .topo files read, and lay out as scionproto's generator
// would: the tiny one's three ASes, one router per interface; the default
// one's sixteen ASes in two ISDs, five core, with routers shared by name
// (-A, -B, -C), peering within and across the ISDs, IPv6 underlays and
// MTUs from 1,350 to 1,472.
func TestShippedTopos(t *testing.T) {
	if got := ShippedTopos(); !slices.Equal(got, []string{"default", "tiny"}) {
		t.Fatalf("ShippedTopos() = %v", got)
	}
	tiny, err := ReadTopo("tiny")
	if err != nil {
		t.Fatal(err)
	}
	if len(tiny.ASes) != 3 || len(tiny.Links) != 2 {
		t.Fatalf("tiny: %d ASes, %d links", len(tiny.ASes), len(tiny.Links))
	}
	if l := tiny.Layout()[addr.MustParseIA("1-ff00:0:a01")]; len(l) != 2 || l[0].Name != "br1-ff00_0_a01-1" || l[1].Interfaces[0].IfID != 8 || l[1].Interfaces[0].LinkTo != "child" {
		t.Fatalf("tiny's core AS laid out as %+v; want a router per unnamed interface", l)
	}

	def, err := ReadTopo("default.topo")
	if err != nil {
		t.Fatal(err)
	}
	cores, isds := 0, map[addr.ISD]bool{}
	for _, a := range def.ASes {
		if a.Core {
			cores++
		}
		isds[a.IA.ISD()] = true
	}
	if len(def.ASes) != 16 || cores != 5 || len(isds) != 2 {
		t.Fatalf("default: %d ASes, %d core, %d ISDs", len(def.ASes), cores, len(isds))
	}
	kinds := map[string]int{}
	crossPeer, v6Links, minMTU, maxMTU := 0, 0, TopoMaxMTU, 0
	for _, l := range def.Links {
		kinds[l.Type]++
		if l.Type == LinkPeer && l.A.IA.ISD() != l.B.IA.ISD() {
			crossPeer++
		}
		if l.Underlay == UnderlayIPv6 {
			v6Links++
		}
		if l.MTU != 0 {
			minMTU, maxMTU = min(minMTU, l.MTU), max(maxMTU, l.MTU)
		}
	}
	if kinds[LinkCore] == 0 || kinds[LinkChild] == 0 || kinds[LinkPeer] == 0 || crossPeer == 0 || v6Links == 0 || minMTU != 1350 {
		t.Fatalf("default: links %v, %d peering across ISDs, %d on IPv6, link MTUs %d–%d", kinds, crossPeer, v6Links, minMTU, maxMTU)
	}
	layout := def.Layout()
	b11 := layout[addr.MustParseIA("1-ff00:0:b11")]
	if len(b11) != 3 {
		t.Fatalf("1-ff00:0:b11 has %d routers, want A, B and C: %+v", len(b11), b11)
	}
	// B is named first (line of a02#15), A second, C third: numbered in order.
	var ifs []int
	for _, r := range b11 {
		ifs = append(ifs, len(r.Interfaces))
	}
	if !slices.Equal(ifs, []int{2, 2, 2}) || b11[0].Interfaces[0].LinkTo != "parent" {
		t.Fatalf("1-ff00:0:b11's routers have %v interfaces; first %+v", ifs, b11[0].Interfaces)
	}
	a02 := layout[addr.MustParseIA("1-ff00:0:a02")]
	if len(a02) != 3 {
		t.Fatalf("1-ff00:0:a02 has %d routers, want A, B and one for the unnamed #15", len(a02))
	}
	for ia, rs := range layout {
		seen := map[uint16]bool{}
		for _, r := range rs {
			for _, i := range r.Interfaces {
				if i.IfID == 0 || seen[i.IfID] {
					t.Fatalf("%s: interface %d unassigned or twice", ia, i.IfID)
				}
				seen[i.IfID] = true
			}
		}
	}
}

// An endpoint without an interface ID gets the AS's lowest free one.
func TestTopoAssignsInterfaceIDs(t *testing.T) {
	top, err := ParseTopo("x.topo", []byte(`
ASes:
  "1-ff00:0:110": {core: true, voting: true, issuing: true}
  "1-ff00:0:111": {cert_issuer: 1-ff00:0:110}
links:
  - {a: "1-ff00:0:110#1", b: "1-ff00:0:111", linkAtoB: CHILD}
  - {a: "1-ff00:0:110", b: "1-ff00:0:111#1", linkAtoB: CHILD}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := top.Layout()
	core, leaf := l[addr.MustParseIA("1-ff00:0:110")], l[addr.MustParseIA("1-ff00:0:111")]
	if core[0].Interfaces[0].IfID != 1 || core[1].Interfaces[0].IfID != 2 || leaf[0].Interfaces[0].IfID != 2 || leaf[1].Interfaces[0].IfID != 1 {
		t.Fatalf("interface IDs: core %+v, leaf %+v", core, leaf)
	}
	if core[1].Interfaces[0].Remote.IfID != 1 {
		t.Fatalf("the far end's ID is the one assigned: %+v", core[1].Interfaces[0])
	}
}

// Every file the lab cannot build is refused before anything is made,
// with the line and what to do.
func TestTopoErrors(t *testing.T) {
	const head = `ASes:
  "1-ff00:0:110": {core: true, voting: true, issuing: true}
  "1-ff00:0:111": {cert_issuer: 1-ff00:0:110}
  "1-ff00:0:112": {cert_issuer: 1-ff00:0:110}
`
	for name, c := range map[string]struct{ text, want string }{
		"not yaml":              {"ASes: [", "not YAML"},
		"top-level key":         {head + "routers: {}\n", `x.topo:5: key "routers"`},
		"no ASes":               {"links: []\n", "ASes: missing"},
		"bad IA":                {"ASes:\n  \"ff00:0:110\": {core: true}\n", `x.topo:2: "ff00:0:110" is not an ISD-AS`},
		"AS twice":              {head + "  \"1-ff00:0:110\": {}\n", "x.topo:5: AS 1-ff00:0:110 named twice"},
		"AS key":                {head + "  \"1-ff00:0:113\": {cert_issuer: 1-ff00:0:110, colibri: true}\n", `x.topo:5: AS 1-ff00:0:113: key "colibri"`},
		"bool":                  {"ASes:\n  \"1-ff00:0:110\": {core: yes please}\n", "core is true or false"},
		"AS mtu":                {"ASes:\n  \"1-ff00:0:110\": {core: true, mtu: 1000}\n", "mtu \"1000\": a SCION MTU from 1280"},
		"AS underlay":           {"ASes:\n  \"1-ff00:0:110\": {core: true, underlay: UDP/IPv5}\n", `underlay "UDP/IPv5"`},
		"voting not core":       {"ASes:\n  \"1-ff00:0:110\": {voting: true}\n", "add core: true"},
		"no voting core":        {"ASes:\n  \"1-ff00:0:110\": {core: true, issuing: true}\n", "ISD 1 has no core AS that votes"},
		"no cert_issuer":        {"ASes:\n  \"1-ff00:0:110\": {core: true, voting: true, issuing: true}\n  \"1-ff00:0:111\": {}\n", "x.topo:3: AS 1-ff00:0:111: no cert_issuer"},
		"issuer not issuing":    {head + "  \"1-ff00:0:113\": {cert_issuer: 1-ff00:0:111}\n", "cert_issuer 1-ff00:0:111 is not an issuing core AS"},
		"link not mapping":      {head + "links:\n  - a\n", "a link is {a:"},
		"link incomplete":       {head + "links:\n  - {a: \"1-ff00:0:110#1\"}\n", "x.topo:6: a link needs a, b and linkAtoB"},
		"link type":             {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:111#1\", linkAtoB: PARENT}\n", `linkAtoB "PARENT": CORE, CHILD`},
		"link key":              {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:111#1\", linkAtoB: CHILD, latency: 5}\n", `link: key "latency"`},
		"endpoint":              {head + "links:\n  - {a: \"1-ff00:0:110#x\", b: \"1-ff00:0:111#1\", linkAtoB: CHILD}\n", `link end "1-ff00:0:110#x"`},
		"endpoint ifid 0":       {head + "links:\n  - {a: \"1-ff00:0:110#0\", b: \"1-ff00:0:111#1\", linkAtoB: CHILD}\n", "from 1 to 65535"},
		"unknown AS":            {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:199#1\", linkAtoB: CHILD}\n", "x.topo:6: link end 1-ff00:0:199#1: AS 1-ff00:0:199 is not among"},
		"self link":             {head + "links:\n  - {a: \"1-ff00:0:111#1\", b: \"1-ff00:0:111#2\", linkAtoB: PEER}\n", "to itself"},
		"core link to non-core": {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:111#1\", linkAtoB: CORE}\n", "1-ff00:0:111 is not core"},
		"core as child":         {head + "links:\n  - {a: \"1-ff00:0:111#1\", b: \"1-ff00:0:110#1\", linkAtoB: CHILD}\n", "1-ff00:0:110 is a core AS: it cannot be"},
		"peer with core":        {head + "links:\n  - {a: \"1-ff00:0:111#1\", b: \"1-ff00:0:110#1\", linkAtoB: PEER}\n", "1-ff00:0:110 is core"},
		"child across ISDs": {`ASes:
  "1-ff00:0:110": {core: true, voting: true, issuing: true}
  "2-ff00:0:210": {core: true, voting: true, issuing: true}
  "2-ff00:0:211": {cert_issuer: 2-ff00:0:210}
links:
  - {a: "1-ff00:0:110#1", b: "2-ff00:0:211#1", linkAtoB: CHILD}
`, "a CHILD link stays in its ISD"},
		"interface twice": {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:111#1\", linkAtoB: CHILD}\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:112#1\", linkAtoB: CHILD}\n",
			"x.topo:7: AS 1-ff00:0:110: interface 1 is already the link's of line 6"},
		"number in two ISDs": {head + "  \"2-ff00:0:110\": {core: true, voting: true, issuing: true}\n", "x.topo:5: AS 2-ff00:0:110 has the number of 1-ff00:0:110 (line 2)"},
		"link mtu":           {head + "links:\n  - {a: \"1-ff00:0:110#1\", b: \"1-ff00:0:111#1\", linkAtoB: CHILD, mtu: 9500}\n", "to 9000 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTopo("x.topo", []byte(c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseTopo = %v; want an error with %q", err, c.want)
			}
		})
	}
	if _, err := ReadTopo("no-such"); err == nil || !strings.Contains(err.Error(), "default, tiny") {
		t.Fatalf("ReadTopo of an unknown name: %v", err)
	}
	p := filepath.Join(t.TempDir(), "mine.topo")
	if err := os.WriteFile(p, []byte("ASes:\n  \"1-ff00:0:110\": {core: true, voting: true, issuing: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if top, err := ReadTopo(p); err != nil || top.Path != p {
		t.Fatalf("ReadTopo(%s) = %v, %v", p, top, err)
	}
}

// --renumber gives every AS a BGP-style number in the file's order, so
// that its hosts have SM-IP addresses; links and issuers follow.
func TestTopoRenumber(t *testing.T) {
	def, err := ReadTopo("default")
	if err != nil {
		t.Fatal(err)
	}
	re, m, err := def.Renumber(64512)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 16 || re.ASes[0].IA != addr.MustParseIA("1-64512") || re.ASes[15].IA != addr.MustParseIA("2-64527") {
		t.Fatalf("renumbered: first %s, last %s, %d mapped", re.ASes[0].IA, re.ASes[15].IA, len(m))
	}
	for _, a := range re.ASes {
		if a.IA.AS() >= 1<<19 || (!a.CertIssuer.IsZero() && a.CertIssuer.AS() >= 1<<19) {
			t.Fatalf("%s (issuer %s) not BGP-style", a.IA, a.CertIssuer)
		}
	}
	if re.Links[0].A.IA != m[def.Links[0].A.IA] || re.Links[0].B.Router != "A" {
		t.Fatalf("link 0 after renumbering: %+v", re.Links[0])
	}
	if _, _, err := def.Renumber(1<<19 - 3); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Fatalf("renumbering past 2^19: %v", err)
	}
}

// The trust of several ISDs from one file: scion-pki testcrypto makes a
// TRC per ISD and every AS's certificate, issued as the file says.
func TestGenerateCryptoForSeveralISDs(t *testing.T) {
	pki, err := scionproto.Binary(scionproto.Default, "scion-pki")
	if err != nil {
		t.Fatal(err)
	}
	def, err := ReadTopo("default")
	if err != nil {
		t.Fatal(err)
	}
	re, _, err := def.Renumber(FirstASN)
	if err != nil {
		t.Fatal(err)
	}
	for _, top := range []*Topo{def, re} {
		dir := t.TempDir()
		trcs, err := GenerateCrypto(pki, top, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(trcs) != 2 || filepath.Base(trcs[0]) != "ISD1-B1-S1.trc" || filepath.Base(trcs[1]) != "ISD2-B1-S1.trc" {
			t.Fatalf("TRCs %v", trcs)
		}
		for _, a := range top.ASes {
			file := addr.FormatAS(a.IA.AS(), addr.WithFileSeparator())
			cert := filepath.Join(dir, "AS"+file, "crypto", "as", fmt.Sprintf("ISD%d-AS%s.pem", a.IA.ISD(), file))
			if _, err := os.Stat(cert); err != nil {
				t.Fatalf("AS %s: %v", a.IA, err)
			}
		}
	}
}
