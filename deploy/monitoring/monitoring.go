// Package monitoring holds fastpath's Grafana dashboards and Prometheus
// alert rules (the files beside it, which make install puts in
// share/fastpath/monitoring) and reads the queries out of them, so that
// tests can run every query against a Prometheus server that scrapes the
// real exporters (internal/obs/promtest).
package monitoring

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed grafana/*.json prometheus/fastpath-alerts.yml
var files embed.FS

// AlertsFile is the alert rules' path in this folder.
const AlertsFile = "prometheus/fastpath-alerts.yml"

// Query is one PromQL expression of a dashboard or an alert rule.
type Query struct {
	// Source says where it is: "grafana/fastpath-br.json: Packets in" or
	// "prometheus/fastpath-alerts.yml: FastpathTableNearFull".
	Source string
	// Raw is the expression as the file has it, Grafana's variables and all.
	Raw string
	// Expr is Raw with Grafana's variables replaced by what they are when
	// "All" is selected ($name → .*, $__rate_interval → 1m): PromQL a
	// Prometheus server takes.
	Expr string
	// Alert is true for an alert or recording rule's expression.
	Alert bool
}

// Dashboards is every dashboard file's name (grafana/…json) and content.
func Dashboards() (map[string][]byte, error) {
	names, err := fs.Glob(files, "grafana/*.json")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out[n] = b
	}
	return out, nil
}

// Alerts is the alert rules file.
func Alerts() []byte {
	b, err := files.ReadFile(AlertsFile)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return b
}

// Dashboard is the part of a Grafana dashboard the queries are read from.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

// Panel is a dashboard panel (rows hold theirs in Panels when collapsed).
type Panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []Panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// AlertRules is the part of a rules file the expressions are read from.
type AlertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// labelValues is a variable's query: label_values(SELECTOR, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// gvar is a Grafana variable in a query: $name, ${name}, ${name:regex}.
var gvar = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(:[a-z]+)?\}|\$([a-zA-Z0-9_]+)`)

// Expand replaces Grafana's variables in a query by what they stand for
// with "All" selected: a regex that matches anything for the dashboards'
// own variables, and a minute for the intervals.
func Expand(q string) string {
	return gvar.ReplaceAllStringFunc(q, func(v string) string {
		m := gvar.FindStringSubmatch(v)
		name := m[1] + m[3]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "1m"
		case "__range_s", "__interval_ms":
			return "60"
		}
		return ".*"
	})
}

// Queries is every query of every dashboard (panel targets, and the
// selectors of the variables' label_values) and every alert rule's
// expression, sorted by source.
func Queries() ([]Query, error) {
	var out []Query
	ds, err := Dashboards()
	if err != nil {
		return nil, err
	}
	for file, b := range ds {
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var walk func(prefix string, ps []Panel)
		walk = func(prefix string, ps []Panel) {
			for _, p := range ps {
				for i, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						continue
					}
					src := fmt.Sprintf("%s: panel %q", file, p.Title)
					if len(p.Targets) > 1 {
						src += fmt.Sprintf(" query %c", 'A'+i)
					}
					out = append(out, Query{Source: src, Raw: tg.Expr, Expr: Expand(tg.Expr)})
				}
				walk(prefix, p.Panels)
			}
		}
		walk(file, d.Panels)
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				out = append(out, Query{Source: fmt.Sprintf("%s: annotation %s", file, a.Name), Raw: a.Expr, Expr: Expand(a.Expr)})
			}
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(string)
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			sel := labelValues.FindStringSubmatch(q)
			if sel == nil {
				return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(SELECTOR, label)", file, v.Name, q)
			}
			out = append(out, Query{Source: fmt.Sprintf("%s: variable %s", file, v.Name), Raw: sel[1], Expr: Expand(sel[1])})
		}
	}
	var rules AlertRules
	if err := yaml.Unmarshal(Alerts(), &rules); err != nil {
		return nil, fmt.Errorf("%s: %w", AlertsFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, Query{Source: AlertsFile + ": " + name, Raw: r.Expr, Expr: r.Expr, Alert: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, nil
}
