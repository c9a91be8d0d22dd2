package fw

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Action is what a rule or the default policy does with a packet.
type Action uint8

// The values mirror enum fw_action in bpf/fw/fw_shared.h; the kernel tests
// check both through the program's verdicts.
const (
	Pass     Action = 0
	Drop     Action = 1
	Synproxy Action = 2
)

// A cached verdict holds the rule's id above its action's bits
// (FW_ACT_BITS).
const (
	actBits = 2
	actMask = 1<<actBits - 1
)

func (a Action) String() string {
	switch a {
	case Drop:
		return "drop"
	case Synproxy:
		return "synproxy"
	}
	return "pass"
}

// UnmarshalTOML reads "pass", "drop" or "synproxy".
func (a *Action) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("action must be \"pass\", \"drop\" or \"synproxy\", not %v", v)
	}
	return a.UnmarshalText([]byte(s))
}

// UnmarshalText reads "pass", "drop" (also accept/allow and deny/block) or
// "synproxy".
func (a *Action) UnmarshalText(b []byte) error {
	switch strings.ToLower(string(b)) {
	case "pass", "accept", "allow":
		*a = Pass
	case "drop", "deny", "block":
		*a = Drop
	case "synproxy":
		*a = Synproxy
	default:
		return fmt.Errorf("unknown action %q: use \"pass\", \"drop\" or \"synproxy\"", b)
	}
	return nil
}

// CtStates is a set of connection-tracking states, the bits of nftables'
// ct state (enum fw_ct_state); a rule with none matches any state.
type CtStates uint8

const (
	CtInvalid     CtStates = 1
	CtEstablished CtStates = 2
	CtRelated     CtStates = 4
	CtNew         CtStates = 8
	CtUntracked   CtStates = 64
)

var ctStateNames = []struct {
	s    CtStates
	name string
}{{CtNew, "new"}, {CtEstablished, "established"}, {CtRelated, "related"}, {CtInvalid, "invalid"}, {CtUntracked, "untracked"}}

// CtStateNames are the states' names in their order: new, established,
// related, invalid, untracked.
func CtStateNames() []string {
	names := make([]string, len(ctStateNames))
	for i, n := range ctStateNames {
		names[i] = n.name
	}
	return names
}

func (c CtStates) String() string {
	var names []string
	for _, n := range ctStateNames {
		if c&n.s != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "any"
	}
	return strings.Join(names, ",")
}

// UnmarshalText reads states separated by commas: "established,related".
func (c *CtStates) UnmarshalText(b []byte) error {
	return c.parse(strings.Split(string(b), ","))
}

func (c *CtStates) parse(names []string) error {
	var set CtStates
	for _, name := range names {
		name = strings.ToLower(strings.TrimSpace(name))
		found := false
		for _, n := range ctStateNames {
			if name == n.name {
				set |= n.s
				found = true
			}
		}
		if !found {
			return fmt.Errorf("unknown ct state %q: use new, established, related, invalid or untracked", name)
		}
	}
	if set == 0 {
		return errors.New("ct_state names no state: use new, established, related, invalid or untracked")
	}
	*c = set
	return nil
}

func (c CtStates) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Protocol numbers the rules name; any other number may be given as is.
var protoNames = map[string]uint8{"any": 0, "icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}

// Proto is an IP protocol number; 0 matches any protocol.
type Proto uint8

func (p Proto) String() string {
	for n, v := range protoNames {
		if uint8(p) == v {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

func (p *Proto) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		return p.UnmarshalText([]byte(v))
	case int64:
		if v < 0 || v > 255 {
			return fmt.Errorf("protocol number %d out of range 0-255", v)
		}
		*p = Proto(v)
		return nil
	}
	return fmt.Errorf("proto must be tcp, udp, icmp, icmpv6, any or a number, not %v", v)
}

func (p *Proto) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	if n, ok := protoNames[s]; ok {
		*p = Proto(n)
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return fmt.Errorf("unknown protocol %q: use tcp, udp, icmp, icmpv6, any or a number 0-255", b)
	}
	*p = Proto(n)
	return nil
}

func (p Proto) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Ports is an inclusive port range. The zero value, never given, means any
// port; "0" given in a file is port 0.
type Ports struct {
	Lo, Hi uint16
	given  bool
}

// AnyPort matches every port.
var AnyPort = Ports{0, math.MaxUint16, true}

// IsAny says the range covers every port.
func (p Ports) IsAny() bool { return !p.given || p.Lo == 0 && p.Hi == math.MaxUint16 }

func (p Ports) String() string {
	switch {
	case p.IsAny():
		return "any"
	case p.Lo == p.Hi:
		return strconv.Itoa(int(p.Lo))
	}
	return fmt.Sprintf("%d-%d", p.Lo, p.Hi)
}

func (p *Ports) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 || v > math.MaxUint16 {
			return fmt.Errorf("port %d out of range 0-65535", v)
		}
		*p = Ports{uint16(v), uint16(v), true}
		return nil
	case string:
		return p.UnmarshalText([]byte(v))
	}
	return fmt.Errorf("a port is a number or a range \"lo-hi\", not %v", v)
}

// UnmarshalText reads "any", "22" or "1024-65535".
func (p *Ports) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "any" || s == "" {
		*p = AnyPort
		return nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	h, err2 := l, error(nil)
	if isRange {
		h, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	}
	if err1 != nil || err2 != nil {
		return fmt.Errorf("bad port or range %q: write a port 0-65535 or \"lo-hi\"", s)
	}
	if l > h {
		return fmt.Errorf("port range %q runs backwards: write the lower port first", s)
	}
	*p = Ports{uint16(l), uint16(h), true}
	return nil
}

func (p Ports) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Prefix is an IPv4 or IPv6 prefix; an address alone is a host prefix. The
// zero value matches any address.
type Prefix struct{ netip.Prefix }

func (p *Prefix) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("an address prefix is a string like \"10.0.0.0/8\", not %v", v)
	}
	return p.UnmarshalText([]byte(s))
}

func (p *Prefix) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" || s == "any" {
		*p = Prefix{}
		return nil
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("bad address %q: write an IPv4 or IPv6 address or prefix", s)
		}
		if a.Zone() != "" {
			return fmt.Errorf("address %q has a zone (%%%s): rules match addresses on any interface, so remove it", s, a.Zone())
		}
		// An IPv4-mapped address (::ffff:a.b.c.d) stays IPv6: it matches
		// IPv6 packets that carry it, as with /128.
		*p = Prefix{netip.PrefixFrom(a, a.BitLen())}
		return nil
	}
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		return fmt.Errorf("bad prefix %q: write it like 10.0.0.0/8 or 2001:db8::/32", s)
	}
	if pf.Masked() != pf {
		return fmt.Errorf("prefix %q has host bits set: did you mean %s?", s, pf.Masked())
	}
	*p = Prefix{pf}
	return nil
}

func (p Prefix) String() string {
	if !p.IsValid() {
		return "any"
	}
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.Prefix.String()
}

func (p Prefix) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Rule matches packets on every field it sets (AND); unset fields match
// anything.
type Rule struct {
	Action Action `toml:"action" json:"action"`
	Src    Prefix `toml:"src" json:"src"`
	Dst    Prefix `toml:"dst" json:"dst"`
	Proto  Proto  `toml:"proto" json:"proto"`
	SPort  Ports  `toml:"sport" json:"sport"`
	DPort  Ports  `toml:"dport" json:"dport"`
	// CtState is the connection-tracking states the rule matches (0: any).
	CtState CtStates `toml:"ct_state" json:"ct_state,omitempty"`
	// Name, optional, identifies the rule in metrics and in fw rules
	// (ID): unique in its set, letters, digits, '_', '.' and '-', at most
	// 64 characters. The kernel keeps it beside the rule.
	Name    string `toml:"name" json:"name,omitempty"`
	Comment string `toml:"comment" json:"comment,omitempty"`
	// Line is where the rule starts in its file (0 if not from a file).
	Line int `toml:"-" json:"-"`
}

// validRuleName is what a rule's name may hold: it is a metric label's
// value and a word on the command line.
var validRuleName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// DefaultRuleID is the default policy's identity, beside the rules' (ID).
const DefaultRuleID = "default"

// ID is the rule's stable identity, the value of the rule label of the
// per-rule metrics and fw rules' RULE column: its name if it has one, else
// "h:" and 12 hex digits of a SHA-256 of what it matches and does (its
// action and match fields, written canonically: not its comment, not its
// position). Inserting or deleting other rules never changes it; editing
// an unnamed rule's fields makes it another rule. Two rules that are the
// same in every field share an identity (the second never matches: the
// first does). A name holds no ':', so no name is ever taken for a hash.
func (r Rule) ID() string {
	if r.Name != "" {
		return r.Name
	}
	sum := sha256.Sum256([]byte(r.identityText()))
	return "h:" + hex.EncodeToString(sum[:6])
}

// identityText is the canonical form ID hashes. Its format is part of the
// metrics' stability: changing it renames every unnamed rule's series.
func (r Rule) identityText() string {
	pfx := func(p Prefix) string {
		if !p.IsValid() {
			return "any"
		}
		return p.Prefix.Masked().String()
	}
	ports := func(p Ports) string {
		if p.IsAny() {
			return "any"
		}
		return fmt.Sprintf("%d-%d", p.Lo, p.Hi)
	}
	return fmt.Sprintf("fw-rule-v1 action=%d src=%s dst=%s proto=%d sport=%s dport=%s ct_state=%d",
		r.Action, pfx(r.Src), pfx(r.Dst), r.Proto, ports(r.SPort), ports(r.DPort), r.CtState)
}

// Family is 4 or 6 for a rule with an address, 0 for one that matches both.
func (r Rule) Family() uint8 {
	for _, p := range []Prefix{r.Src, r.Dst} {
		if p.IsValid() {
			if p.Addr().Is4() {
				return 4
			}
			return 6
		}
	}
	if r.Proto == 1 {
		return 4
	}
	if r.Proto == 58 {
		return 6
	}
	return 0
}

func (r Rule) String() string {
	var parts []string
	if r.Src.IsValid() {
		parts = append(parts, "src "+r.Src.String())
	}
	if r.Dst.IsValid() {
		parts = append(parts, "dst "+r.Dst.String())
	}
	if r.Proto != 0 {
		parts = append(parts, "proto "+r.Proto.String())
	}
	if !r.SPort.IsAny() {
		parts = append(parts, "sport "+r.SPort.String())
	}
	if !r.DPort.IsAny() {
		parts = append(parts, "dport "+r.DPort.String())
	}
	if r.CtState != 0 {
		parts = append(parts, "ct state "+r.CtState.String())
	}
	if len(parts) == 0 {
		parts = append(parts, "all")
	}
	return r.Action.String() + " " + strings.Join(parts, " ")
}

// Validate checks the fields against each other. Decoding checked each alone.
func (r *Rule) Validate() error {
	if r.Src.IsValid() && r.Dst.IsValid() && r.Src.Addr().Is4() != r.Dst.Addr().Is4() {
		return fmt.Errorf("src %s and dst %s are of different address families: no packet can match", r.Src, r.Dst)
	}
	fam := r.Family()
	if (r.Proto == 1 && fam == 6) || (r.Proto == 58 && fam == 4) {
		return fmt.Errorf("proto %s does not go with %s addresses", r.Proto, map[uint8]string{4: "IPv4", 6: "IPv6"}[fam])
	}
	if (!r.SPort.IsAny() || !r.DPort.IsAny()) && r.Proto != 6 && r.Proto != 17 {
		return fmt.Errorf("ports need proto = \"tcp\" or \"udp\" (proto is %s): write one rule per protocol", r.Proto)
	}
	if r.Action == Synproxy && r.Proto != 6 {
		return fmt.Errorf("action synproxy answers TCP SYNs: it needs proto = \"tcp\" (proto is %s)", r.Proto)
	}
	return nil
}

// Conntrack holds the connection-tracking options of a rules file. Tracking
// is on when a rule matches on ct_state or synproxies, or Enabled says so;
// a set without a Conntrack (a file without the table) keeps the
// instance's tracking and options as they are (Firewall.Install).
type Conntrack struct {
	Enabled bool `toml:"enabled" json:"enabled,omitempty"`
	// NoPickup refuses to take up a TCP connection from a mid-stream
	// packet (nf_conntrack_tcp_loose = 0): such a packet is invalid.
	NoPickup bool `toml:"no_pickup" json:"no_pickup,omitempty"`
	// Liberal skips the TCP window checks (nf_conntrack_tcp_be_liberal).
	Liberal bool `toml:"liberal" json:"liberal,omitempty"`
	// Strict makes invalid what conntrack lets through unchanged: an old
	// retransmission, a SYN on a live connection, an ACK far behind.
	Strict bool `toml:"strict" json:"strict,omitempty"`
	// PerSource and PerNetwork bound the share of the established table
	// (the one that never evicts) that one source may hold: at most
	// PerSource connections opened from one address (IPv4) or /64 (IPv6),
	// and PerNetwork from one network of NetworkPrefix4 or NetworkPrefix6
	// bits. A connection over its source's share stays in the embryonic
	// table and tries again each second. nil: the defaults (the table's
	// size / 64 and / 16, /24 and /48); 0: no bound.
	PerSource      *uint32 `toml:"per_source" json:"per_source,omitempty"`
	PerNetwork     *uint32 `toml:"per_network" json:"per_network,omitempty"`
	NetworkPrefix4 int     `toml:"network_prefix4" json:"network_prefix4,omitempty"`
	NetworkPrefix6 int     `toml:"network_prefix6" json:"network_prefix6,omitempty"`
}

// The prefixes a source's share is counted by: an IPv4 address, an IPv6
// /64 (what one host is given), and by default the networks around them.
const (
	sourcePrefix4         = 32
	sourcePrefix6         = 64
	defaultNetworkPrefix4 = 24
	defaultNetworkPrefix6 = 48
)

// Validate checks the options that have a range.
func (c *Conntrack) Validate() error {
	if c.NetworkPrefix4 < 0 || c.NetworkPrefix4 > sourcePrefix4 {
		return fmt.Errorf("conntrack.network_prefix4 = %d: an IPv4 network is 1 to 32 bits (0: the default, %d)", c.NetworkPrefix4, defaultNetworkPrefix4)
	}
	if c.NetworkPrefix6 < 0 || c.NetworkPrefix6 > sourcePrefix6 {
		return fmt.Errorf("conntrack.network_prefix6 = %d: an IPv6 network is 1 to 64 bits, a source being a /64 (0: the default, %d)", c.NetworkPrefix6, defaultNetworkPrefix6)
	}
	return nil
}

// shares gives the bounds per source and per network for a table of
// ctMax entries.
func (c *Conntrack) shares(ctMax uint32) (perSource, perNetwork uint32, net4, net6 uint8) {
	perSource, perNetwork = max(ctMax/64, 1), max(ctMax/16, 1)
	net4, net6 = defaultNetworkPrefix4, defaultNetworkPrefix6
	if c == nil {
		return
	}
	if c.PerSource != nil {
		perSource = *c.PerSource
	}
	if c.PerNetwork != nil {
		perNetwork = *c.PerNetwork
	}
	if c.NetworkPrefix4 > 0 {
		net4 = uint8(c.NetworkPrefix4)
	}
	if c.NetworkPrefix6 > 0 {
		net6 = uint8(c.NetworkPrefix6)
	}
	return
}

// ConntrackOn says whether the set needs connection tracking.
func (rs *RuleSet) ConntrackOn() bool {
	if rs.Conntrack != nil && rs.Conntrack.Enabled {
		return true
	}
	for _, r := range rs.Rules {
		if r.CtState != 0 || r.Action == Synproxy {
			return true
		}
	}
	return false
}

// RateLimit blocks a source that sends more than PPS packets or BPS bits in
// one second, for BlockFor. A zero threshold is off.
type RateLimit struct {
	PPS      uint64   `toml:"pps" json:"pps"`
	BPS      uint64   `toml:"bps" json:"bps"`
	BlockFor Duration `toml:"block_for" json:"block_for"`
}

// Enabled says a threshold is set.
func (r RateLimit) Enabled() bool { return r.PPS > 0 || r.BPS > 0 }

// Duration is a time.Duration written as "10s" or "5m".
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v < 0 {
		return fmt.Errorf("bad duration %q: write it like \"30s\" or \"10m\"", b)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// RuleSet is a rules file: the default policy, the rate limit and the rules,
// first match wins.
type RuleSet struct {
	Default   Action     `toml:"default" json:"default"`
	RateLimit *RateLimit `toml:"rate_limit" json:"rate_limit,omitempty"`
	Conntrack *Conntrack `toml:"conntrack" json:"conntrack,omitempty"`
	Rules     []Rule     `toml:"rule" json:"rules"`
	// File is where the set was read from, for messages.
	File string `toml:"-" json:"-"`
}

// MaxRules bounds a rule set: both slots' counters share fw_stats
// (FW_MAX_STATS entries).
const MaxRules = 1<<18 - 1

// ErrInvalid wraps every rule-file and rule error.
var ErrInvalid = errors.New("invalid rules")

// RulesError is an invalid rules file or rule: where (the file, and the
// line when known) and what. errors.Is(err, ErrInvalid) holds for it; logs
// take File and Line as attributes.
type RulesError struct {
	File string
	// Line is 0 when the error is not about one line.
	Line int
	Msg  string
}

func (e *RulesError) Error() string {
	where := e.File
	switch {
	case e.Line > 0:
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	case e.File == "":
		where = "rule"
	}
	return fmt.Sprintf("%v: %s: %s", ErrInvalid, where, e.Msg)
}

func (e *RulesError) Unwrap() error { return ErrInvalid }

func (rs *RuleSet) errorf(line int, format string, args ...any) error {
	return &RulesError{File: rs.File, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// LoadRules reads and validates a TOML rules file.
func LoadRules(path string) (*RuleSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	return ParseRules(path, b)
}

// Validate checks every rule, naming the file and line of the first bad one.
func (rs *RuleSet) Validate() error {
	if len(rs.Rules) > MaxRules {
		return rs.errorf(0, "%d rules, at most %d", len(rs.Rules), MaxRules)
	}
	if rs.Conntrack != nil {
		if err := rs.Conntrack.Validate(); err != nil {
			return rs.errorf(0, "%v", err)
		}
	}
	named := map[string]int{}
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if !r.SPort.given {
			r.SPort = AnyPort
		}
		if !r.DPort.given {
			r.DPort = AnyPort
		}
		if err := r.Validate(); err != nil {
			return rs.errorf(r.Line, "rule %d: %v", i+1, err)
		}
		if r.Name == "" {
			continue
		}
		if err := checkRuleName(r.Name); err != nil {
			return rs.errorf(r.Line, "rule %d: %v", i+1, err)
		}
		if j, dup := named[r.Name]; dup {
			return rs.errorf(r.Line, "rule %d: name %q is rule %d's already%s: names identify rules in metrics, give each its own", i+1, r.Name, j+1, lineOf(rs.Rules[j]))
		}
		named[r.Name] = i
	}
	if rl := rs.RateLimit; rl != nil && rl.Enabled() && rl.BlockFor.Duration <= 0 {
		return rs.errorf(0, "rate_limit has thresholds but no block_for: add block_for = \"10s\"")
	}
	return nil
}

func lineOf(r Rule) string {
	if r.Line > 0 {
		return fmt.Sprintf(" (line %d)", r.Line)
	}
	return ""
}

// checkRuleName says what is wrong with a rule's name, if anything.
func checkRuleName(name string) error {
	if !validRuleName.MatchString(name) {
		return fmt.Errorf("name %q: use 1 to 64 letters, digits, '_', '.' or '-'", name)
	}
	if name == DefaultRuleID {
		return fmt.Errorf("name %q is the default policy's in metrics: choose another", name)
	}
	return nil
}

// Matches says whether the rule matches the flow: the semantics the kernel
// implements, written plainly.
func (r Rule) Matches(fl Flow) bool {
	is4 := fl.Src.Is4()
	switch r.Family() {
	case 4:
		if !is4 {
			return false
		}
	case 6:
		if is4 {
			return false
		}
	}
	if r.Proto != 0 && r.Proto != fl.Proto {
		return false
	}
	if r.CtState != 0 && r.CtState&fl.CtState == 0 {
		return false
	}
	if fl.Fragment && (!r.SPort.IsAny() || !r.DPort.IsAny()) {
		return false
	}
	if !r.SPort.IsAny() && (fl.SPort < r.SPort.Lo || fl.SPort > r.SPort.Hi) {
		return false
	}
	if !r.DPort.IsAny() && (fl.DPort < r.DPort.Lo || fl.DPort > r.DPort.Hi) {
		return false
	}
	if r.Src.IsValid() && !r.Src.Contains(fl.Src) {
		return false
	}
	return !r.Dst.IsValid() || r.Dst.Contains(fl.Dst)
}

// Match returns the first rule that matches (its 1-based number) and its
// action, or 0 and the default policy.
func (rs *RuleSet) Match(fl Flow) (int, Action) {
	for i, r := range rs.Rules {
		if r.Matches(fl) {
			return i + 1, r.Action
		}
	}
	return 0, rs.Default
}

// WriteTOML writes the set as a rules file that ParseRules reads back.
func (rs *RuleSet) WriteTOML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "default = %q\n", rs.Default)
	if rl := rs.RateLimit; rl != nil {
		fmt.Fprintf(bw, "\n[rate_limit]\npps = %d\nbps = %d\nblock_for = %q\n", rl.PPS, rl.BPS, rl.BlockFor.String())
	}
	if ct := rs.Conntrack; ct != nil {
		fmt.Fprintf(bw, "\n[conntrack]\nenabled = %t\nno_pickup = %t\nliberal = %t\nstrict = %t\n", ct.Enabled, ct.NoPickup, ct.Liberal, ct.Strict)
		if ct.PerSource != nil {
			fmt.Fprintf(bw, "per_source = %d\n", *ct.PerSource)
		}
		if ct.PerNetwork != nil {
			fmt.Fprintf(bw, "per_network = %d\n", *ct.PerNetwork)
		}
		if ct.NetworkPrefix4 != 0 {
			fmt.Fprintf(bw, "network_prefix4 = %d\n", ct.NetworkPrefix4)
		}
		if ct.NetworkPrefix6 != 0 {
			fmt.Fprintf(bw, "network_prefix6 = %d\n", ct.NetworkPrefix6)
		}
	}
	for _, r := range rs.Rules {
		fmt.Fprintf(bw, "\n[[rule]]\naction = %q\n", r.Action)
		if r.Src.IsValid() {
			fmt.Fprintf(bw, "src = %q\n", r.Src.Prefix.String())
		}
		if r.Dst.IsValid() {
			fmt.Fprintf(bw, "dst = %q\n", r.Dst.Prefix.String())
		}
		if r.Proto != 0 {
			fmt.Fprintf(bw, "proto = %q\n", r.Proto)
		}
		if !r.SPort.IsAny() {
			fmt.Fprintf(bw, "sport = %q\n", r.SPort)
		}
		if !r.DPort.IsAny() {
			fmt.Fprintf(bw, "dport = %q\n", r.DPort)
		}
		if r.CtState != 0 {
			fmt.Fprintf(bw, "ct_state = %q\n", r.CtState)
		}
		if r.Name != "" {
			fmt.Fprintf(bw, "name = %q\n", r.Name)
		}
		if r.Comment != "" {
			fmt.Fprintf(bw, "comment = %q\n", r.Comment)
		}
	}
	return bw.Flush()
}
