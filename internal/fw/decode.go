package fw

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/pelletier/go-toml/v2/unstable"
)

// A rules file is read with go-toml's parser, which keeps where every key
// and value is in the file, rather than decoded into structs: each error
// can then name the line of the key it is about (also for unknown keys, a
// key after its table ended, or a [[rule]] line inside a multi-line
// string, which is no rule), and 100,000 rules decode without reflection.

// decoder holds the state of one file's decoding.
type decoder struct {
	file string
	doc  []byte
	p    unstable.Parser
	rs   *RuleSet
	// table is where key = value lines go: "" (top level), "rate_limit" or
	// "rule".
	table string
	seen  map[string]int // keys of the current table, with their line
	// lastOff and lastLine make line numbers incremental: counting from the
	// start for each key would be quadratic in the file's length.
	lastOff, lastLine int
	hasAction         []bool
}

// ParseRules decodes and validates rules; name is the file name messages
// use. Errors say the line and what to change.
func ParseRules(name string, b []byte) (*RuleSet, error) {
	d := &decoder{file: name, doc: b, rs: &RuleSet{File: name}, lastLine: 1}
	d.p.Reset(b)
	for d.p.NextExpression() {
		if err := d.expression(d.p.Expression()); err != nil {
			return nil, err
		}
	}
	if err := d.p.Error(); err != nil {
		line := 0
		if pe, ok := err.(*unstable.ParserError); ok {
			line = d.line(pe.Highlight)
		}
		return nil, d.errorf(line, "%v", err)
	}
	for i, ok := range d.hasAction {
		if !ok {
			return nil, d.errorf(d.rs.Rules[i].Line, "rule %d has no action: add action = \"drop\" or \"pass\"", i+1)
		}
	}
	if err := d.rs.Validate(); err != nil {
		return nil, err
	}
	return d.rs, nil
}

func (d *decoder) errorf(line int, format string, args ...any) error {
	return &RulesError{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// line is the line of b, a slice of the document (0 if it is not one).
func (d *decoder) line(b []byte) int {
	if len(b) == 0 || len(d.doc) == 0 {
		return 0
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(d.doc)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < start || p >= start+uintptr(len(d.doc)) {
		return 0
	}
	return d.lineAt(int(p - start))
}

func (d *decoder) lineAt(off int) int {
	if off < d.lastOff {
		d.lastOff, d.lastLine = 0, 1
	}
	for _, c := range d.doc[d.lastOff:off] {
		if c == '\n' {
			d.lastLine++
		}
	}
	d.lastOff = off
	return d.lastLine
}

// nodeLine is the line of a value node.
func (d *decoder) nodeLine(n *unstable.Node) int {
	if n.Raw.Length > 0 || n.Raw.Offset > 0 {
		return d.lineAt(int(n.Raw.Offset))
	}
	return d.line(n.Data)
}

// keyOf returns a key's dotted parts and the line of its first part.
func (d *decoder) keyOf(n *unstable.Node) ([]string, int) {
	var parts []string
	line := 0
	it := n.Key()
	for it.Next() {
		k := it.Node()
		if line == 0 {
			line = d.line(k.Data)
		}
		parts = append(parts, string(k.Data))
	}
	return parts, line
}

const knownKeys = "known are default, rate_limit.{pps,bps,block_for}, conntrack.{enabled,no_pickup,liberal,strict,per_source,per_network,network_prefix4,network_prefix6} and rule.{action,name,src,dst,proto,sport,dport,ct_state,comment}"

func (d *decoder) expression(e *unstable.Node) error {
	switch e.Kind {
	case unstable.Table, unstable.ArrayTable:
		parts, line := d.keyOf(e)
		name := strings.Join(parts, ".")
		switch {
		case e.Kind == unstable.Table && (name == "rate_limit" || name == "conntrack"):
			if !d.openTable(name) {
				return d.errorf(line, "[%s] is defined twice: keep one", name)
			}
		case e.Kind == unstable.ArrayTable && name == "rule":
			d.newRule(line)
		case e.Kind == unstable.Table && name == "rule":
			return d.errorf(line, "[rule] is one table, not a list of rules: write [[rule]]")
		default:
			return d.errorf(line, "unknown table %q: %s", name, knownKeys)
		}
		d.table, d.seen = name, map[string]int{}
		return nil
	case unstable.KeyValue:
		parts, line := d.keyOf(e)
		v := e.Value()
		if l := d.nodeLine(v); line == 0 {
			line = l
		}
		if d.seen == nil {
			d.seen = map[string]int{}
		}
		full := strings.Join(parts, ".")
		if first, dup := d.seen[full]; dup {
			return d.errorf(line, "%s is set twice (first on line %d): keep one", full, first)
		}
		d.seen[full] = line
		return d.keyValue(d.table, parts, v, line)
	}
	return nil
}

func (d *decoder) newRule(line int) {
	d.rs.Rules = append(d.rs.Rules, Rule{Line: line})
	d.hasAction = append(d.hasAction, false)
}

// openTable makes the set's table of that name (rate_limit, conntrack);
// false if it was there already.
func (d *decoder) openTable(name string) bool {
	switch name {
	case "rate_limit":
		if d.rs.RateLimit == nil {
			d.rs.RateLimit = &RateLimit{}
			return true
		}
	case "conntrack":
		if d.rs.Conntrack == nil {
			d.rs.Conntrack = &Conntrack{}
			return true
		}
	}
	return false
}

// keyValue sets one key of table (dotted parts are relative to it).
func (d *decoder) keyValue(table string, parts []string, v *unstable.Node, line int) error {
	if table == "" && len(parts) > 1 {
		table, parts = parts[0], parts[1:]
		d.openTable(table) // dotted keys may set one table's keys on several lines
	}
	key := parts[0]
	if len(parts) > 1 {
		return d.errorf(line, "unknown key %q: %s", table+"."+strings.Join(parts, "."), knownKeys)
	}
	switch table {
	case "":
		switch key {
		case "default":
			s, err := d.str(v, line, "default")
			if err != nil {
				return err
			}
			if err := d.rs.Default.UnmarshalText([]byte(s)); err != nil {
				return d.errorf(line, "default: %v", err)
			}
			return nil
		case "rate_limit", "conntrack":
			if v.Kind != unstable.InlineTable {
				return d.errorf(line, "%s is a table: write [%s] and its keys on the lines below", key, key)
			}
			if !d.openTable(key) {
				return d.errorf(line, "%s is defined twice: keep one", key)
			}
			return d.inlineTable(key, v)
		case "rule":
			if v.Kind != unstable.Array {
				return d.errorf(line, "rule is a list of tables: write [[rule]] before each rule's keys")
			}
			it := v.Children()
			for it.Next() {
				t := it.Node()
				if t.Kind != unstable.InlineTable {
					return d.errorf(d.nodeLine(t), "each rule is a table: write [[rule]] before each rule's keys")
				}
				d.newRule(d.nodeLine(t))
				if err := d.inlineTable("rule", t); err != nil {
					return err
				}
			}
			return nil
		}
		return d.errorf(line, "unknown key %q: %s", key, knownKeys)
	case "rate_limit":
		rl := d.rs.RateLimit
		switch key {
		case "pps", "bps":
			n, err := d.rate(v, line, key)
			if err != nil {
				return err
			}
			if key == "pps" {
				rl.PPS = n
			} else {
				rl.BPS = n
			}
			return nil
		case "block_for":
			s, err := d.str(v, line, key)
			if err != nil {
				return err
			}
			if err := rl.BlockFor.UnmarshalText([]byte(s)); err != nil {
				return d.errorf(line, "block_for: %v", err)
			}
			return nil
		}
		return d.errorf(line, "unknown key %q in [rate_limit]: %s", key, knownKeys)
	case "conntrack":
		ct := d.rs.Conntrack
		switch key {
		case "per_source", "per_network", "network_prefix4", "network_prefix6":
			if v.Kind != unstable.Integer {
				return d.errorf(line, "conntrack.%s must be a whole number, not %s", key, d.raw(v))
			}
			i, err := d.integer(v, line, key)
			if err != nil {
				return err
			}
			if i < 0 || i > math.MaxUint32 {
				return d.errorf(line, "conntrack.%s = %d is out of range: write 0 or a positive number", key, i)
			}
			n := uint32(i)
			switch key {
			case "per_source":
				ct.PerSource = &n
			case "per_network":
				ct.PerNetwork = &n
			case "network_prefix4":
				ct.NetworkPrefix4 = int(n)
			default:
				ct.NetworkPrefix6 = int(n)
			}
			if err := ct.Validate(); err != nil {
				return d.errorf(line, "%v", err)
			}
			return nil
		}
		fields := map[string]*bool{"enabled": &ct.Enabled, "no_pickup": &ct.NoPickup, "liberal": &ct.Liberal, "strict": &ct.Strict}
		f, ok := fields[key]
		if !ok {
			return d.errorf(line, "unknown key %q in [conntrack]: %s", key, knownKeys)
		}
		if v.Kind != unstable.Bool {
			return d.errorf(line, "conntrack.%s must be true or false, not %s", key, d.raw(v))
		}
		*f = string(v.Data) == "true"
		return nil
	case "rule":
		return d.ruleKey(&d.rs.Rules[len(d.rs.Rules)-1], len(d.rs.Rules), key, v, line)
	}
	return d.errorf(line, "unknown key %q: %s", table+"."+key, knownKeys)
}

// inlineTable sets the keys of an inline table { k = v, ... }.
func (d *decoder) inlineTable(table string, t *unstable.Node) error {
	seen := map[string]bool{}
	it := t.Children()
	for it.Next() {
		kv := it.Node()
		parts, line := d.keyOf(kv)
		if line == 0 {
			line = d.nodeLine(t)
		}
		full := strings.Join(parts, ".")
		if seen[full] {
			return d.errorf(line, "%s is set twice in one table: keep one", full)
		}
		seen[full] = true
		if err := d.keyValue(table, parts, kv.Value(), line); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) ruleKey(r *Rule, n int, key string, v *unstable.Node, line int) error {
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return d.errorf(line, "%v", err)
	}
	switch key {
	case "action":
		s, err := d.str(v, line, key)
		if err != nil {
			return err
		}
		d.hasAction[n-1] = true
		return wrap(r.Action.UnmarshalText([]byte(s)))
	case "src", "dst":
		s, err := d.str(v, line, key)
		if err != nil {
			return err
		}
		p := &r.Src
		if key == "dst" {
			p = &r.Dst
		}
		return wrap(p.UnmarshalText([]byte(s)))
	case "proto":
		switch v.Kind {
		case unstable.String:
			return wrap(r.Proto.UnmarshalText(v.Data))
		case unstable.Integer:
			i, err := d.integer(v, line, key)
			if err != nil {
				return err
			}
			return wrap(r.Proto.UnmarshalTOML(i))
		}
		return d.errorf(line, "rule %d: proto must be tcp, udp, icmp, icmpv6, any or a number, not %s", n, d.raw(v))
	case "sport", "dport":
		p := &r.SPort
		if key == "dport" {
			p = &r.DPort
		}
		switch v.Kind {
		case unstable.String:
			return wrap(p.UnmarshalText(v.Data))
		case unstable.Integer:
			i, err := d.integer(v, line, key)
			if err != nil {
				return err
			}
			return wrap(p.UnmarshalTOML(i))
		}
		return d.errorf(line, "rule %d: a port is a number or a range \"lo-hi\", not %s", n, d.raw(v))
	case "ct_state":
		switch v.Kind {
		case unstable.String:
			return wrap(r.CtState.UnmarshalText(v.Data))
		case unstable.Array:
			var names []string
			it := v.Children()
			for it.Next() {
				e := it.Node()
				if e.Kind != unstable.String {
					return d.errorf(line, "rule %d: ct_state lists states as strings, not %s", n, d.raw(e))
				}
				names = append(names, string(e.Data))
			}
			return wrap(r.CtState.parse(names))
		}
		return d.errorf(line, "rule %d: ct_state is a state or a list of them, like [\"established\", \"related\"], not %s", n, d.raw(v))
	case "comment":
		s, err := d.str(v, line, key)
		r.Comment = s
		return err
	case "name":
		s, err := d.str(v, line, key)
		if err != nil {
			return err
		}
		r.Name = s
		if err := checkRuleName(s); err != nil {
			return d.errorf(line, "rule %d: %v", n, err)
		}
		return nil
	case "default", "rate_limit", "conntrack":
		return d.errorf(line, "%s is a key of rule %d here: top-level keys must come before the first [[rule]]: move it up", key, n)
	}
	return d.errorf(line, "unknown key %q in rule %d: %s", key, n, knownKeys)
}

func (d *decoder) raw(v *unstable.Node) string {
	if v.Raw.Length > 0 {
		return string(d.p.Raw(v.Raw))
	}
	return "a " + strings.ToLower(v.Kind.String())
}

func (d *decoder) str(v *unstable.Node, line int, key string) (string, error) {
	if v.Kind != unstable.String {
		return "", d.errorf(line, "%s must be a string, not %s", key, d.raw(v))
	}
	return string(v.Data), nil
}

func (d *decoder) integer(v *unstable.Node, line int, key string) (int64, error) {
	i, err := strconv.ParseInt(string(v.Data), 0, 64)
	if err != nil {
		return 0, d.errorf(line, "%s: bad integer %s", key, v.Data)
	}
	return i, nil
}

// rate reads a threshold: a whole number, 0 (off) or more. A negative one
// would wrap to a huge value and silently turn the limit off.
func (d *decoder) rate(v *unstable.Node, line int, key string) (uint64, error) {
	if v.Kind != unstable.Integer {
		return 0, d.errorf(line, "%s must be a whole number, not %s", key, d.raw(v))
	}
	i, err := d.integer(v, line, key)
	if err != nil {
		return 0, err
	}
	if i < 0 {
		return 0, d.errorf(line, "%s = %d is negative: write 0 to turn this threshold off, or a positive rate", key, i)
	}
	return uint64(i), nil
}
