package scionlab

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/scionproto/scion/pkg/addr"
	"gopkg.in/yaml.v3"
)

// A .topo file is how scionproto describes a test network (its
// topology/*.topo, read by scion.sh topology): the ASes, each with its
// role in its ISD's trust (core, voting, authoritative, issuing, or the
// cert_issuer that signs its certificate), MTU and underlay, and the links
// between them, each endpoint "ISD-AS[-ROUTER]#IFID" and the link's type
// from A's side (CORE, CHILD: B is A's child, PEER). This file reads one,
// checks everything the lab would need before anything is made, and lays
// it out as scionproto's generator would: an endpoint naming a router
// (1-ff00:0:110-A#1) shares that router with the AS's other endpoints of
// the same name; one naming none gets a router of its own.

// Underlays a .topo names.
const (
	UnderlayIPv4 = "UDP/IPv4"
	UnderlayIPv6 = "UDP/IPv6"
)

// Link types a .topo names (linkAtoB).
const (
	LinkCore  = "CORE"
	LinkChild = "CHILD"
	LinkPeer  = "PEER"
)

// TopoMinMTU is SCION's smallest MTU; TopoMaxMTU the largest the lab's
// routers take (a link of MaxMTU less the underlay).
const (
	TopoMinMTU = 1280
	TopoMaxMTU = MaxMTU - UnderlayOverhead
)

// Topo is a .topo file, read and checked.
type Topo struct {
	Path  string
	Text  []byte   // the file as read
	ASes  []TopoAS // in the file's order
	Links []TopoLink
}

// TopoAS is an AS of a .topo file.
type TopoAS struct {
	IA                                   addr.IA
	Core, Voting, Authoritative, Issuing bool
	// CertIssuer signs the AS's certificate: an issuing core AS of its ISD
	// (a core AS that issues signs its own).
	CertIssuer addr.IA
	// MTU is the AS's SCION MTU (its internal network's); 0: unset.
	MTU      int
	Underlay string // UnderlayIPv4 or UnderlayIPv6
	Line     int
}

// TopoEndpoint is one end of a link: the AS, the router the interface is
// on ("" when the file names none), and the interface ID (0 when the file
// gives none: Layout assigns one).
type TopoEndpoint struct {
	IA     addr.IA
	Router string
	IfID   uint16
}

func (e TopoEndpoint) String() string {
	s := e.IA.String()
	if e.Router != "" {
		s += "-" + e.Router
	}
	if e.IfID != 0 {
		s += "#" + strconv.Itoa(int(e.IfID))
	}
	return s
}

// TopoLink is a link of a .topo file.
type TopoLink struct {
	A, B TopoEndpoint
	Type string // LinkCore, LinkChild (B is A's child) or LinkPeer
	// MTU of the link's interfaces (SCION MTU); 0: the AS's.
	MTU      int
	Underlay string
	Line     int
}

// The lab's own .topo files: tiny (three ASes) and default (sixteen in two
// ISDs), shaped as scionproto's files of those names.
//
//go:embed topos/*.topo
var shippedTopos embed.FS

// ShippedTopos are the names of the lab's own .topo files.
func ShippedTopos() []string {
	ents, _ := shippedTopos.ReadDir("topos")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".topo"))
	}
	return out
}

// ReadTopo reads and checks a .topo file: a path, or the name of one of
// the lab's own (ShippedTopos) when no file of that name exists.
func ReadTopo(path string) (*Topo, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !strings.ContainsRune(path, filepath.Separator) {
		if sb, serr := shippedTopos.ReadFile("topos/" + strings.TrimSuffix(path, ".topo") + ".topo"); serr == nil {
			return ParseTopo(strings.TrimSuffix(path, ".topo")+".topo (the lab's own)", sb)
		}
		return nil, fmt.Errorf("%s: no such file, nor one of the lab's own .topo files (%s)", path, strings.Join(ShippedTopos(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return ParseTopo(path, b)
}

// topoError is "file:line: what is wrong; what to do".
func topoError(path string, n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...))
}

// ParseTopo reads a .topo file's text (path names it in errors) and checks
// it whole: every error names the line and the key.
func ParseTopo(path string, text []byte) (*Topo, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", path, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: a .topo file is a mapping with the keys ASes and links", path)
	}
	t := &Topo{Path: path, Text: text}
	root := doc.Content[0]
	var ases, links *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "ASes":
			ases = v
		case "links":
			links = v
		default:
			return nil, topoError(path, k, "key %q: a .topo file has ASes and links only", k.Value)
		}
	}
	if ases == nil || ases.Kind != yaml.MappingNode || len(ases.Content) == 0 {
		return nil, topoError(path, ases, "ASes: missing or empty; list the ASes as \"ISD-AS\": {core: true, ...}")
	}
	for i := 0; i+1 < len(ases.Content); i += 2 {
		a, err := parseTopoAS(path, ases.Content[i], ases.Content[i+1])
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(t.ASes, func(o TopoAS) bool { return o.IA == a.IA }) {
			return nil, topoError(path, ases.Content[i], "AS %s named twice", a.IA)
		}
		t.ASes = append(t.ASes, a)
	}
	if links != nil {
		if links.Kind != yaml.SequenceNode {
			return nil, topoError(path, links, "links: a list of {a: ..., b: ..., linkAtoB: ...}")
		}
		for _, n := range links.Content {
			l, err := parseTopoLink(path, n)
			if err != nil {
				return nil, err
			}
			t.Links = append(t.Links, l)
		}
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
}

func parseTopoAS(path string, k, v *yaml.Node) (TopoAS, error) {
	a := TopoAS{Underlay: UnderlayIPv4, Line: k.Line}
	ia, err := addr.ParseIA(k.Value)
	if err != nil || ia.ISD() == 0 || ia.AS() == 0 {
		return a, topoError(path, k, "%q is not an ISD-AS (like 1-ff00:0:110 or 1-64512)", k.Value)
	}
	a.IA = ia
	if v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || v.Value == "") {
		return a, nil
	}
	if v.Kind != yaml.MappingNode {
		return a, topoError(path, v, "AS %s: its settings are a mapping (core: true, mtu: 1400, ...)", ia)
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		key, val := v.Content[i], v.Content[i+1]
		var err error
		switch key.Value {
		case "core":
			a.Core, err = topoBool(path, ia, key, val)
		case "voting":
			a.Voting, err = topoBool(path, ia, key, val)
		case "authoritative":
			a.Authoritative, err = topoBool(path, ia, key, val)
		case "issuing":
			a.Issuing, err = topoBool(path, ia, key, val)
		case "cert_issuer":
			a.CertIssuer, err = addr.ParseIA(val.Value)
			if err != nil {
				err = topoError(path, val, "AS %s: cert_issuer %q is not an ISD-AS", ia, val.Value)
			}
		case "mtu":
			a.MTU, err = topoMTU(path, fmt.Sprintf("AS %s", ia), val)
		case "underlay":
			a.Underlay, err = topoUnderlay(path, fmt.Sprintf("AS %s", ia), val)
		default:
			err = topoError(path, key, "AS %s: key %q is not one the lab takes (core, voting, authoritative, issuing, cert_issuer, mtu, underlay)", ia, key.Value)
		}
		if err != nil {
			return a, err
		}
	}
	return a, nil
}

func topoBool(path string, ia addr.IA, k, v *yaml.Node) (bool, error) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
		return false, topoError(path, v, "AS %s: %s is true or false, not %q", ia, k.Value, v.Value)
	}
	return b, nil
}

func topoMTU(path, what string, v *yaml.Node) (int, error) {
	var m int
	if v.Kind != yaml.ScalarNode || v.Decode(&m) != nil || m < TopoMinMTU || m > TopoMaxMTU {
		return 0, topoError(path, v, "%s: mtu %q: a SCION MTU from %d to %d bytes (the lab's links carry it with %d bytes of IPv4/UDP underlay)",
			what, v.Value, TopoMinMTU, TopoMaxMTU, UnderlayOverhead)
	}
	return m, nil
}

func topoUnderlay(path, what string, v *yaml.Node) (string, error) {
	switch v.Value {
	case UnderlayIPv4, UnderlayIPv6:
		return v.Value, nil
	}
	return "", topoError(path, v, "%s: underlay %q: %s or %s", what, v.Value, UnderlayIPv4, UnderlayIPv6)
}

func parseTopoLink(path string, n *yaml.Node) (TopoLink, error) {
	l := TopoLink{Underlay: UnderlayIPv4, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return l, topoError(path, n, "a link is {a: \"ISD-AS[-ROUTER]#IFID\", b: ..., linkAtoB: CORE|CHILD|PEER}")
	}
	var haveA, haveB bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		var err error
		switch key.Value {
		case "a":
			l.A, err = parseTopoEndpoint(path, val)
			haveA = true
		case "b":
			l.B, err = parseTopoEndpoint(path, val)
			haveB = true
		case "linkAtoB":
			switch t := strings.ToUpper(val.Value); t {
			case LinkCore, LinkChild, LinkPeer:
				l.Type = t
			default:
				err = topoError(path, val, "linkAtoB %q: CORE, CHILD (b is a's child) or PEER", val.Value)
			}
		case "mtu":
			l.MTU, err = topoMTU(path, "link", val)
		case "underlay":
			l.Underlay, err = topoUnderlay(path, "link", val)
		case "bw":
			// A bandwidth for scionproto's docker links; veths have none.
		default:
			err = topoError(path, key, "link: key %q is not one the lab takes (a, b, linkAtoB, mtu, underlay, bw)", key.Value)
		}
		if err != nil {
			return l, err
		}
	}
	if !haveA || !haveB || l.Type == "" {
		return l, topoError(path, n, "a link needs a, b and linkAtoB")
	}
	return l, nil
}

// parseTopoEndpoint reads "ISD-AS[-ROUTER][#IFID]".
func parseTopoEndpoint(path string, v *yaml.Node) (TopoEndpoint, error) {
	var e TopoEndpoint
	bad := func(why string) error {
		return topoError(path, v, "link end %q: %s; write ISD-AS[-ROUTER][#IFID], like 1-ff00:0:110-A#1", v.Value, why)
	}
	s, ifid, hasIfID := strings.Cut(v.Value, "#")
	if hasIfID {
		n, err := strconv.ParseUint(ifid, 10, 16)
		if err != nil || n == 0 {
			return e, bad("the interface ID is a number from 1 to 65535")
		}
		e.IfID = uint16(n)
	}
	parts := strings.Split(s, "-")
	switch len(parts) {
	case 2:
	case 3:
		e.Router = parts[2]
		if e.Router == "" || strings.ContainsAny(e.Router, " /\\:") {
			return e, bad("the router name is a word")
		}
	default:
		return e, bad("not an ISD-AS")
	}
	ia, err := addr.ParseIA(parts[0] + "-" + parts[1])
	if err != nil || ia.ISD() == 0 || ia.AS() == 0 {
		return e, bad("not an ISD-AS")
	}
	e.IA = ia
	return e, nil
}

// AS is the AS of that IA, if the file has it.
func (t *Topo) AS(ia addr.IA) (TopoAS, bool) {
	i := slices.IndexFunc(t.ASes, func(a TopoAS) bool { return a.IA == ia })
	if i < 0 {
		return TopoAS{}, false
	}
	return t.ASes[i], true
}

// check is what SCION and the lab need of the whole: links between ASes
// of the file, of a type their roles allow, interface IDs unique per AS;
// every ISD with a voting core AS that issues, every other AS with an
// issuer of its ISD.
func (t *Topo) check() error {
	isds := map[addr.ISD]struct{ voting, issuing bool }{}
	for _, a := range t.ASes {
		s := isds[a.IA.ISD()]
		if a.Voting || a.Authoritative || a.Issuing {
			if !a.Core {
				return fmt.Errorf("%s:%d: AS %s: voting, authoritative and issuing are for core ASes; add core: true", t.Path, a.Line, a.IA)
			}
		}
		s.voting = s.voting || a.Voting
		s.issuing = s.issuing || a.Issuing
		isds[a.IA.ISD()] = s
	}
	for isd, s := range isds {
		if !s.voting || !s.issuing {
			return fmt.Errorf("%s: ISD %d has no core AS that votes and one that issues: its trust root cannot be made (mark a core AS voting: true, issuing: true)", t.Path, isd)
		}
	}
	for _, a := range t.ASes {
		switch {
		case a.Core && a.Issuing:
			if !a.CertIssuer.IsZero() && a.CertIssuer != a.IA {
				return fmt.Errorf("%s:%d: AS %s issues certificates itself; drop cert_issuer", t.Path, a.Line, a.IA)
			}
		case a.CertIssuer.IsZero():
			return fmt.Errorf("%s:%d: AS %s: no cert_issuer; name an issuing core AS of ISD %d", t.Path, a.Line, a.IA, a.IA.ISD())
		default:
			is, ok := t.AS(a.CertIssuer)
			if !ok || !is.Issuing || a.CertIssuer.ISD() != a.IA.ISD() {
				return fmt.Errorf("%s:%d: AS %s: cert_issuer %s is not an issuing core AS of ISD %d in this file", t.Path, a.Line, a.IA, a.CertIssuer, a.IA.ISD())
			}
		}
	}
	// The lab (and scion-pki testcrypto) keeps an AS's files by its number.
	byNumber := map[addr.AS]TopoAS{}
	for _, a := range t.ASes {
		if o, dup := byNumber[a.IA.AS()]; dup {
			return fmt.Errorf("%s:%d: AS %s has the number of %s (line %d): the lab keeps an AS's files by its number; give it another", t.Path, a.Line, a.IA, o.IA, o.Line)
		}
		byNumber[a.IA.AS()] = a
	}
	ifids := map[addr.IA]map[uint16]int{}
	for _, l := range t.Links {
		at, okA := t.AS(l.A.IA)
		bt, okB := t.AS(l.B.IA)
		switch {
		case !okA:
			return fmt.Errorf("%s:%d: link end %s: AS %s is not among the file's ASes", t.Path, l.Line, l.A, l.A.IA)
		case !okB:
			return fmt.Errorf("%s:%d: link end %s: AS %s is not among the file's ASes", t.Path, l.Line, l.B, l.B.IA)
		case l.A.IA == l.B.IA:
			return fmt.Errorf("%s:%d: a link from AS %s to itself; its routers share its internal network", t.Path, l.Line, l.A.IA)
		}
		switch l.Type {
		case LinkCore:
			if !at.Core || !bt.Core {
				return fmt.Errorf("%s:%d: a CORE link joins core ASes, and %s", t.Path, l.Line, nonCore(at, bt))
			}
		case LinkChild:
			if bt.Core {
				return fmt.Errorf("%s:%d: %s is a core AS: it cannot be %s's child (a CORE link joins core ASes)", t.Path, l.Line, bt.IA, at.IA)
			}
			if at.IA.ISD() != bt.IA.ISD() {
				return fmt.Errorf("%s:%d: a CHILD link stays in its ISD; %s and %s are in ISDs %d and %d", t.Path, l.Line, at.IA, bt.IA, at.IA.ISD(), bt.IA.ISD())
			}
		case LinkPeer:
			if at.Core || bt.Core {
				return fmt.Errorf("%s:%d: a PEER link joins non-core ASes (core ASes meet by CORE links), and %s is core", t.Path, l.Line, coreOf(at, bt))
			}
		}
		for _, e := range []TopoEndpoint{l.A, l.B} {
			if e.IfID == 0 {
				continue
			}
			if ifids[e.IA] == nil {
				ifids[e.IA] = map[uint16]int{}
			}
			if prev, dup := ifids[e.IA][e.IfID]; dup {
				return fmt.Errorf("%s:%d: AS %s: interface %d is already the link's of line %d", t.Path, l.Line, e.IA, e.IfID, prev)
			}
			ifids[e.IA][e.IfID] = l.Line
		}
	}
	return nil
}

func nonCore(a, b TopoAS) string {
	if !a.Core {
		return a.IA.String() + " is not core"
	}
	return b.IA.String() + " is not core"
}

func coreOf(a, b TopoAS) addr.IA {
	if a.Core {
		return a.IA
	}
	return b.IA
}

// TopoRouter is a border router of the layout: its name as scionproto's
// generator gives it (br<ISD-AS file form>-<n>) and its interfaces.
type TopoRouter struct {
	Name       string
	IA         addr.IA
	Interfaces []TopoInterface
}

// TopoInterface is one end of a link, on its router.
type TopoInterface struct {
	IfID     uint16
	Remote   TopoEndpoint // the far end, its interface ID assigned
	LinkTo   string       // the far AS from here: core, parent, child or peer
	MTU      int
	Underlay string
	Line     int
}

// Layout gives each AS its routers, in the file's order: the first
// endpoint naming a router makes it (numbered in order), the next of the
// same name joins it, and an endpoint naming none gets a router of its
// own. An endpoint without an interface ID gets the AS's lowest free one.
func (t *Topo) Layout() map[addr.IA][]TopoRouter {
	routers, _ := t.layout()
	return routers
}

// laidLink is a link of the layout: its ends with their interface IDs
// assigned, and the index of each end's router among its AS's routers.
type laidLink struct {
	TopoLink
	RouterA, RouterB int
}

// layout is Layout, and the file's links as laid out.
func (t *Topo) layout() (map[addr.IA][]TopoRouter, []laidLink) {
	used := map[addr.IA]map[uint16]bool{}
	for _, l := range t.Links {
		for _, e := range []TopoEndpoint{l.A, l.B} {
			if used[e.IA] == nil {
				used[e.IA] = map[uint16]bool{}
			}
			if e.IfID != 0 {
				used[e.IA][e.IfID] = true
			}
		}
	}
	assign := func(e TopoEndpoint) TopoEndpoint {
		if e.IfID != 0 {
			return e
		}
		for id := uint16(1); ; id++ {
			if !used[e.IA][id] {
				used[e.IA][id] = true
				e.IfID = id
				return e
			}
		}
	}
	out := map[addr.IA][]TopoRouter{}
	named := map[string]int{} // "IA router" → index in out[IA]
	router := func(e TopoEndpoint) int {
		key := e.IA.String() + " " + e.Router
		if e.Router != "" {
			if i, ok := named[key]; ok {
				return i
			}
		}
		n := len(out[e.IA]) + 1
		out[e.IA] = append(out[e.IA], TopoRouter{Name: fmt.Sprintf("br%s-%d", addr.FormatIA(e.IA, addr.WithFileSeparator()), n), IA: e.IA})
		if e.Router != "" {
			named[key] = n - 1
		}
		return n - 1
	}
	var links []laidLink
	for _, l := range t.Links {
		a, b := assign(l.A), assign(l.B)
		toB, toA := strings.ToLower(l.Type), strings.ToLower(l.Type)
		if l.Type == LinkChild {
			toB, toA = "child", "parent"
		}
		ra := router(a)
		out[a.IA][ra].Interfaces = append(out[a.IA][ra].Interfaces, TopoInterface{IfID: a.IfID, Remote: b, LinkTo: toB, MTU: l.MTU, Underlay: l.Underlay, Line: l.Line})
		rb := router(b)
		out[b.IA][rb].Interfaces = append(out[b.IA][rb].Interfaces, TopoInterface{IfID: b.IfID, Remote: a, LinkTo: toA, MTU: l.MTU, Underlay: l.Underlay, Line: l.Line})
		laid := laidLink{TopoLink: l, RouterA: ra, RouterB: rb}
		laid.A, laid.B = a, b
		links = append(links, laid)
	}
	return out, links
}

// Renumber gives every AS a BGP-style number, from first on in the file's
// order, so that its hosts have SCION-mapped IPv6 addresses (the
// translator's); ISDs stay. It returns the renumbered copy and the map
// from old to new.
func (t *Topo) Renumber(first addr.AS) (*Topo, map[addr.IA]addr.IA, error) {
	if len(t.ASes) == 0 {
		return t, nil, nil
	}
	last := uint64(first) + uint64(len(t.ASes)) - 1
	if first == 0 || last >= 1<<19 {
		return nil, nil, fmt.Errorf("renumber from %d: %d ASes do not fit the BGP-style numbers that have SM-IP addresses (1 to %d)", first, len(t.ASes), 1<<19-1)
	}
	m := map[addr.IA]addr.IA{}
	for i, a := range t.ASes {
		m[a.IA] = addr.MustIAFrom(a.IA.ISD(), first+addr.AS(i))
	}
	re := func(ia addr.IA) addr.IA {
		if n, ok := m[ia]; ok {
			return n
		}
		return ia
	}
	out := &Topo{Path: t.Path, Text: t.Text}
	for _, a := range t.ASes {
		a.IA = re(a.IA)
		if !a.CertIssuer.IsZero() {
			a.CertIssuer = re(a.CertIssuer)
		}
		out.ASes = append(out.ASes, a)
	}
	for _, l := range t.Links {
		l.A.IA, l.B.IA = re(l.A.IA), re(l.B.IA)
		out.Links = append(out.Links, l)
	}
	if err := out.check(); err != nil {
		return nil, nil, errors.Join(errors.New("the renumbered network"), err)
	}
	return out, m, nil
}

// FormatLayout is the layout as `lab scion topo` prints it: each AS with
// its role, MTU and underlay, then its routers and their interfaces.
func FormatLayout(t *Topo) string {
	var b strings.Builder
	layout := t.Layout()
	fmt.Fprintf(&b, "%s: %d ASes, %d links\n", t.Path, len(t.ASes), len(t.Links))
	for _, a := range t.ASes {
		role := "non-core, certificate from " + a.CertIssuer.String()
		if a.Core {
			var r []string
			for _, x := range []struct {
				on   bool
				name string
			}{{a.Voting, "voting"}, {a.Authoritative, "authoritative"}, {a.Issuing, "issuing"}} {
				if x.on {
					r = append(r, x.name)
				}
			}
			role = strings.Join(append([]string{"core"}, r...), ", ")
		}
		mtu := "mtu default"
		if a.MTU != 0 {
			mtu = fmt.Sprintf("mtu %d", a.MTU)
		}
		fmt.Fprintf(&b, "%s  (%s; %s; %s)\n", a.IA, role, mtu, a.Underlay)
		for _, r := range layout[a.IA] {
			fmt.Fprintf(&b, "  %s\n", r.Name)
			for _, i := range r.Interfaces {
				extra := ""
				if i.MTU != 0 {
					extra = fmt.Sprintf(", mtu %d", i.MTU)
				}
				fmt.Fprintf(&b, "    #%-5d %-6s %s (%s%s)\n", i.IfID, i.LinkTo, i.Remote, i.Underlay, extra)
			}
		}
	}
	return b.String()
}

// TrustInput is the .topo text scion-pki testcrypto reads: every AS with
// its role in its ISD's trust (the links are not its business).
func (t *Topo) TrustInput() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- # the ASes of %s, for scion-pki testcrypto\nASes:\n", t.Path)
	for _, a := range t.ASes {
		var attrs []string
		for _, x := range []struct {
			on   bool
			name string
		}{{a.Core, "core"}, {a.Voting, "voting"}, {a.Authoritative, "authoritative"}, {a.Issuing, "issuing"}} {
			if x.on {
				attrs = append(attrs, x.name+": true")
			}
		}
		if !a.CertIssuer.IsZero() && a.CertIssuer != a.IA {
			attrs = append(attrs, fmt.Sprintf("cert_issuer: %q", a.CertIssuer.String()))
		}
		fmt.Fprintf(&b, "  %q: {%s}\n", a.IA.String(), strings.Join(attrs, ", "))
	}
	return b.String()
}

// GenerateCrypto has scion-pki testcrypto (pki) make the trust of every
// ISD of t under dir: a TRC per ISD (trcs/ISD<n>-B1-S1.trc), and per AS
// its certificates and keys (AS<file form>/crypto); it returns the TRCs.
func GenerateCrypto(pki string, t *Topo, dir string) ([]string, error) {
	in := filepath.Join(dir, "topology.topo")
	if err := os.WriteFile(in, []byte(t.TrustInput()), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(pki, "testcrypto", "-t", in, "-o", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scion-pki testcrypto: %v: %s", err, out)
	}
	trcs, err := filepath.Glob(filepath.Join(dir, "trcs", "*.trc"))
	if err != nil {
		return nil, err
	}
	isds := map[addr.ISD]bool{}
	for _, a := range t.ASes {
		isds[a.IA.ISD()] = true
	}
	if len(trcs) != len(isds) {
		return nil, fmt.Errorf("scion-pki testcrypto wrote %d TRCs under %s for %d ISDs", len(trcs), filepath.Join(dir, "trcs"), len(isds))
	}
	return trcs, nil
}
