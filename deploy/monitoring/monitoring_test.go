package monitoring

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
)

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(obstest.Promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The rules file is what Prometheus loads, without a warning.
func TestAlertRulesCheck(t *testing.T) {
	out := promtool(t, "prometheus", "check", "rules", "fastpath-alerts.yml")
	if !strings.Contains(out, "SUCCESS") || strings.Contains(strings.ToLower(out), "warn") {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

// The unit tests of the rules pass.
func TestAlertRulesUnit(t *testing.T) {
	out := promtool(t, "prometheus", "test", "rules", "fastpath-alerts.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func alertRules(t *testing.T) AlertRules {
	t.Helper()
	var r AlertRules
	if err := yaml.Unmarshal(Alerts(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Every alert is tested firing and not firing, and says what to do.
func TestAlertRulesCovered(t *testing.T) {
	b, err := os.ReadFile("prometheus/fastpath-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] {
				t.Errorf("%s: no unit test in fastpath-alerts.test.yml where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no unit test in fastpath-alerts.test.yml where it does not fire", r.Alert)
			}
			if !strings.HasPrefix(r.Alert, "Fastpath") {
				t.Errorf("%s: fastpath's alerts are named Fastpath… (the overview dashboard selects them so)", r.Alert)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description", r.Alert)
			}
			anchor := "docs/monitoring.md#" + strings.ToLower(r.Alert)
			if !strings.Contains(r.Annotations["description"], anchor) {
				t.Errorf("%s: the description should point at %s", r.Alert, anchor)
			}
			if !strings.Contains(string(doc), "\n### "+r.Alert+"\n") {
				t.Errorf("%s: docs/monitoring.md has no section \"### %s\" for the alert's link", r.Alert, r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts in the rules file")
	}
}

// The operations.md sections the alerts link to exist.
func TestAlertLinks(t *testing.T) {
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(ops), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[githubAnchor(h)] = true
		}
	}
	for _, m := range regexp.MustCompile(`docs/operations\.md#([a-z0-9-]+)`).FindAllStringSubmatch(string(Alerts()), -1) {
		if !anchors[m[1]] {
			t.Errorf("fastpath-alerts.yml links docs/operations.md#%s: no such section (have %v)", m[1], anchors)
		}
	}
}

// githubAnchor is the anchor GitHub makes of a heading.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// Every dashboard is JSON Grafana 10 and 11 import as it is: the data
// source is the dashboard's own variable (no UID of somebody's Grafana),
// unique uids and panel ids, and every panel queries something.
func TestDashboardsImportable(t *testing.T) {
	ds, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Errorf("%d dashboards, want 5 (overview, br, fw, tra, rt)", len(ds))
	}
	uids := map[string]string{}
	for file, b := range ds {
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if v, _ := raw["schemaVersion"].(float64); v < 36 || v > 41 {
			t.Errorf("%s: schemaVersion %v, want one of Grafana 10 or 11 (36–41)", file, raw["schemaVersion"])
		}
		if _, ok := raw["__inputs"]; ok {
			t.Errorf("%s: __inputs makes the file importable through the UI only; use the datasource variable", file)
		}
		var d Dashboard
		json.Unmarshal(b, &d)
		if d.UID == "" || uids[d.UID] != "" {
			t.Errorf("%s: uid %q empty or also %s's", file, d.UID, uids[d.UID])
		}
		uids[d.UID] = file
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
			if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
				t.Errorf("%s: variable datasource must be of type datasource, query prometheus", file)
			}
		}
		for _, want := range []string{"datasource", "job", "instance"} {
			if !slices.Contains(vars, want) {
				t.Errorf("%s: no variable %s (have %v)", file, want, vars)
			}
		}
		if !strings.Contains(file, "overview") && !strings.Contains(file, "-rt") && !slices.Contains(vars, "name") {
			t.Errorf("%s: no variable name (fastpath's instance name)", file)
		}
		walkDatasources(t, file, "", raw)
		ids := map[float64]bool{}
		var panels []any
		panels, _ = raw["panels"].([]any)
		for _, p := range panels {
			pm := p.(map[string]any)
			id, _ := pm["id"].(float64)
			if ids[id] {
				t.Errorf("%s: panel id %v twice", file, id)
			}
			ids[id] = true
			if pm["type"] == "row" {
				continue
			}
			if ts, _ := pm["targets"].([]any); len(ts) == 0 {
				t.Errorf("%s: panel %q has no query", file, pm["title"])
			}
			if pm["description"] == "" {
				t.Errorf("%s: panel %q has no description", file, pm["title"])
			}
		}
	}
}

// walkDatasources fails the test for every datasource reference that is
// not the dashboard's variable (or Grafana's own built-in annotations).
func walkDatasources(t *testing.T, file, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := path + "." + k
			if k == "datasource" {
				switch d := c.(type) {
				case map[string]any:
					uid, _ := d["uid"].(string)
					if uid != "${datasource}" && !(uid == "-- Grafana --" && d["type"] == "grafana") {
						t.Errorf("%s: %s is data source uid %q, not the variable ${datasource}", file, p, uid)
					}
				case string:
					if c != "${datasource}" {
						t.Errorf("%s: %s is data source %q, not the variable ${datasource}", file, p, c)
					}
				default:
					if c != nil {
						t.Errorf("%s: %s: data source %v", file, p, c)
					}
				}
				continue
			}
			walkDatasources(t, file, p, c)
		}
	case []any:
		for i, c := range v {
			walkDatasources(t, file, fmt.Sprintf("%s[%d]", path, i), c)
		}
	}
}

// Every query parses as PromQL, by Prometheus' own parser: each becomes an
// alert of a rule file that promtool checks.
func TestQueriesParse(t *testing.T) {
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 50 {
		t.Fatalf("only %d queries found", len(qs))
	}
	write := func(qs []Query) string {
		var b strings.Builder
		b.WriteString("groups:\n  - name: queries\n    rules:\n")
		for i, q := range qs {
			ex, _ := json.Marshal(q.Expr) // a JSON string is a YAML string
			fmt.Fprintf(&b, "      - alert: Q%d\n        expr: %s\n", i, ex)
		}
		f := filepath.Join(t.TempDir(), "queries.yml")
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tool := obstest.Promtool(t)
	if out, err := exec.Command(tool, "check", "rules", write(qs)).CombinedOutput(); err == nil {
		return
	} else {
		t.Logf("promtool check rules: %v\n%s", err, out)
	}
	// Which ones: one at a time.
	for _, q := range qs {
		if out, err := exec.Command(tool, "check", "rules", write([]Query{q})).CombinedOutput(); err != nil {
			t.Errorf("%s does not parse: %s\n%s", q.Source, q.Expr, out)
		}
	}
}

// Every query names only families of fastpath's exporters (with labels
// they have), scionproto's router's, Prometheus' own (up, ALERTS), the
// standard process_* and go_* ones, or the rules file's recordings.
func TestQueriesNameKnownFamilies(t *testing.T) {
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, g := range alertRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	used := map[string]bool{}
	for _, q := range qs {
		ref, err := references(q.Raw)
		if err != nil {
			t.Errorf("%s: %v", q.Source, err)
			continue
		}
		for name, labels := range ref.selectors {
			used[name] = true
			known, ok := SpecFamilies[name]
			if !ok {
				known, ok = RouterFamilies[name]
			}
			switch {
			case ok:
			case name == "up" || recorded[name]:
				ok, known = true, []string{"function", "name", "reason"}
			case name == "ALERTS":
				ok, known = true, []string{"alertname", "alertstate", "severity", "function"}
			case strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "go_"):
				ok = true
			}
			if !ok {
				t.Errorf("%s: %s is no family of fastpath's exporters (SpecFamilies), scionproto's router, or a standard one", q.Source, name)
				continue
			}
			for _, l := range labels {
				if l != "job" && l != "instance" && !slices.Contains(known, l) {
					t.Errorf("%s: %s has no label %s (it has %v)", q.Source, name, l, known)
				}
			}
		}
		// Grouping labels are labels of some family the query names, or
		// Prometheus' target labels, or one label_replace adds.
		var all []string
		for name := range ref.selectors {
			all = append(all, SpecFamilies[name]...)
			all = append(all, RouterFamilies[name]...)
		}
		for _, l := range ref.grouping {
			if l != "job" && l != "instance" && l != "function" && !slices.Contains(all, l) && !slices.Contains([]string{"reason", "name"}, l) {
				t.Errorf("%s: groups by %s, which no family of the query has", q.Source, l)
			}
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("families the dashboards and alerts use: %s", strings.Join(names, " "))
}

type refs struct {
	selectors map[string][]string // metric name → label names of its matchers
	grouping  []string            // labels of by, without, on, ignoring, group_left, group_right
}

var token = regexp.MustCompile(`\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `|[0-9][0-9a-zA-Z.]*|[a-zA-Z_:][a-zA-Z0-9_:]*|=~|!~|!=|==|>=|<=|.`)

var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "offset": true, "bool": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true,
}

// references reads the metric names (with their matchers' labels) and the
// grouping labels out of a PromQL expression: a lexer, not a parser (which
// TestQueriesParse leaves to promtool), enough for names and labels.
func references(expr string) (refs, error) {
	r := refs{selectors: map[string][]string{}}
	var toks []string
	for _, tk := range token.FindAllString(expr, -1) {
		if strings.TrimSpace(tk) != "" {
			toks = append(toks, tk)
		}
	}
	ident := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	next := func(i int) string {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return ""
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch {
		case tk == "[":
			for i < len(toks) && toks[i] != "]" {
				i++
			}
		case tk == "{":
			// An anonymous selector: only __name__="…" names a family.
			labels, name, end, err := matchers(toks, i)
			if err != nil {
				return r, err
			}
			if name == "" {
				return r, fmt.Errorf("a selector without a metric name: %s", expr)
			}
			r.selectors[name] = append(r.selectors[name], labels...)
			i = end
		case ident.MatchString(tk) && keywords[tk]:
			if slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, tk) && next(i) == "(" {
				for i += 2; i < len(toks) && toks[i] != ")"; i++ {
					if toks[i] != "," {
						r.grouping = append(r.grouping, toks[i])
					}
				}
			}
		case ident.MatchString(tk) && (next(i) == "(" || next(i) == "by" || next(i) == "without"):
			// a function or an aggregation (sum by (…) (…))
		case ident.MatchString(tk):
			if _, ok := r.selectors[tk]; !ok {
				r.selectors[tk] = nil
			}
			if next(i) == "{" {
				labels, _, end, err := matchers(toks, i+1)
				if err != nil {
					return r, err
				}
				r.selectors[tk] = append(r.selectors[tk], labels...)
				i = end
			}
		}
	}
	return r, nil
}

// matchers reads {label op "value", …} from toks[open]; it returns the
// labels, the name a __name__="…" matcher gives, and the index of "}".
func matchers(toks []string, open int) ([]string, string, int, error) {
	var labels []string
	name := ""
	i := open + 1
	for ; i < len(toks) && toks[i] != "}"; i++ {
		if toks[i] == "," {
			continue
		}
		if i+2 >= len(toks) {
			break
		}
		l, op, v := toks[i], toks[i+1], toks[i+2]
		if !slices.Contains([]string{"=", "!=", "=~", "!~"}, op) {
			return nil, "", i, fmt.Errorf("matcher %s %s %s", l, op, v)
		}
		if l == "__name__" && op == "=" {
			name = strings.Trim(v, "\"'`")
		} else {
			labels = append(labels, l)
		}
		i += 2
	}
	if i >= len(toks) {
		return nil, "", i, fmt.Errorf("no } after {")
	}
	return labels, name, i, nil
}

// The lexer finds names, matcher labels and grouping labels, and skips
// functions, keywords, strings and durations.
func TestReferences(t *testing.T) {
	for expr, want := range map[string]refs{
		`sum by (reason) (rate(fastpath_fw_dropped_pkts_total{name=~"$name"}[5m] offset 1h))`: {
			selectors: map[string][]string{"fastpath_fw_dropped_pkts_total": {"name"}}, grouping: []string{"reason"}},
		`changes(process_start_time_seconds[1h]) * on (job, instance) group_left (function) fastpath_build_info > 2`: {
			selectors: map[string][]string{"process_start_time_seconds": nil, "fastpath_build_info": nil}, grouping: []string{"job", "instance", "function"}},
		`label_replace(x{a="b,c"} == 1, "function", "br", "", "") or vector(0)`: {
			selectors: map[string][]string{"x": {"a"}}},
		`{__name__="up",job="j"} and bool 1`: {selectors: map[string][]string{"up": {"job"}}},
	} {
		got, err := references(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if fmt.Sprint(got.selectors) != fmt.Sprint(want.selectors) || fmt.Sprint(got.grouping) != fmt.Sprint(want.grouping) {
			t.Errorf("%s:\n got %v %v\nwant %v %v", expr, got.selectors, got.grouping, want.selectors, want.grouping)
		}
	}
}

// The example scrape configuration is one Prometheus takes, scrapes each
// function on the port its daemon serves by default, under a job name
// FastpathExporterDown recognises, and loads the alert rules.
func TestExampleConfig(t *testing.T) {
	b, err := os.ReadFile("prometheus/prometheus.example.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RuleFiles) != 1 || filepath.Base(cfg.RuleFiles[0]) != "fastpath-alerts.yml" {
		t.Errorf("rule_files %v: want the alert rules", cfg.RuleFiles)
	}
	ports := map[string]string{"fastpath-br": obs.AddrBR, "fastpath-fw": obs.AddrFW, "fastpath-tra": obs.AddrTRA, "fastpath-rt": obs.AddrRT}
	for _, sc := range cfg.ScrapeConfigs {
		addr, ok := ports[sc.JobName]
		if !ok {
			continue
		}
		delete(ports, sc.JobName)
		_, want, _ := net.SplitHostPort(addr)
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				if _, port, _ := net.SplitHostPort(tg); port != want {
					t.Errorf("job %s scrapes %s: the daemon serves on port %s (obs.Addr…)", sc.JobName, tg, want)
				}
			}
		}
	}
	if len(ports) > 0 {
		t.Errorf("no scrape config for %v", ports)
	}
	// promtool checks the rule files it names: point it at this folder's.
	abs, _ := filepath.Abs(AlertsFile)
	local := strings.Replace(string(b), cfg.RuleFiles[0], abs, 1)
	f := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(f, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, ".", "check", "config", f)
}
