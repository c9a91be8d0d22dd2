package monitoring

// The dashboards are written here, as Go, and the JSON files in grafana/
// are what this makes of them: TestDashboardsGenerated fails when they
// differ, and FASTPATH_BLESS=1 go test ./deploy/monitoring/ rewrites them.
// One builder keeps the five dashboards alike (variables, datasource,
// units, the panels every daemon has) where five hand-edited exports
// would drift apart.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ds is every panel's and query's datasource: the dashboard's own
// variable, so that an operator imports the file as it is and picks the
// Prometheus server there.
var ds = map[string]any{"type": "prometheus", "uid": "${datasource}"}

type target struct {
	expr, legend string
	instant      bool
	table        bool
}

type panel struct {
	kind, title, desc string
	unit              string
	w, h              int
	targets           []target
	stack             bool
	max               *float64 // bar gauges of fill: 1
	row               bool
}

func q(expr, legend string) target { return target{expr: expr, legend: legend} }

func ts(title, unit, desc string, ts ...target) panel {
	return panel{kind: "timeseries", title: title, unit: unit, desc: desc, w: 12, h: 8, targets: ts}
}

func stat(title, unit, desc string, t target) panel {
	t.instant = true
	return panel{kind: "stat", title: title, unit: unit, desc: desc, w: 4, h: 4, targets: []target{t}}
}

func row(title string) panel { return panel{kind: "row", title: title, row: true, w: 24, h: 1} }

func fill(title, desc, expr, legend string) panel {
	one := 1.0
	return panel{kind: "bargauge", title: title, unit: "percentunit", desc: desc, w: 12, h: 8, max: &one,
		targets: []target{{expr: expr, legend: legend, instant: true}}}
}

func table(title, desc, expr string) panel {
	return panel{kind: "table", title: title, desc: desc, w: 12, h: 6,
		targets: []target{{expr: expr, instant: true, table: true}}}
}

func (p panel) wide() panel    { p.w = 24; return p }
func (p panel) stacked() panel { p.stack = true; return p }

type variable struct {
	name, label, query string // query: label_values(...)
}

type dashboard struct {
	file, uid, title, desc string
	tags                   []string
	vars                   []variable
	// restarts: the selector of the process_start_time_seconds series
	// whose changes are marked on every graph.
	restarts string
	panels   []panel
}

// The selectors the dashboards filter by. $job and $instance are
// Prometheus' target labels, $name fastpath's instance name.
const (
	jobInst = `job=~"$job",instance=~"$instance"`
	sel     = jobInst + `,name=~"$name"`
	ri      = `[$__rate_interval]`
)

func rate(family, s, by string) string {
	return fmt.Sprintf("sum by (%s) (rate(%s{%s}%s))", by, family, s, ri)
}

// fnOf scopes process_* series to one function's daemons.
func fnOf(fn string) string {
	return fmt.Sprintf(`on (job, instance) group_left () fastpath_build_info{function="%s"}`, fn)
}

// common are the first and last panels of a function's dashboard: what
// runs, since when, how often it restarted, what it logged.
func head(fn string, extra ...panel) []panel {
	ps := []panel{
		row("Daemons"),
		stat("Version", "", "fastpath_build_info: the version each selected daemon runs (one per instance; several mean a rollout in progress).",
			target{expr: fmt.Sprintf(`count by (version) (fastpath_build_info{function="%s",%s})`, fn, jobInst), legend: "{{version}}"}),
		stat("Exporters up", "", "Targets of the selected jobs whose last scrape succeeded (up == 1), of all selected targets.",
			q(fmt.Sprintf(`sum(up{%s})`, jobInst), "")),
		stat("Up since", "dateTimeFromNow", "When the longest-running selected daemon started (process_start_time_seconds).",
			q(fmt.Sprintf(`min(process_start_time_seconds{%s} * %s) * 1000`, jobInst, fnOf(fn)), "")),
		stat("Restarts in 24 h", "", "Changes of process_start_time_seconds over a day, summed over the selected daemons; the FastpathDaemonRestarting alert fires at more than 2 in an hour.",
			q(fmt.Sprintf(`sum(changes(process_start_time_seconds{%s}[24h]) * %s)`, jobInst, fnOf(fn)), "")),
	}
	return append(ps, extra...)
}

func tail(fn string, logs bool) []panel {
	ps := []panel{
		row("Process and logs"),
		table("Builds", "fastpath_build_info of every selected daemon: version, commit, Go version.",
			fmt.Sprintf(`fastpath_build_info{function="%s",%s}`, fn, jobInst)),
		ts("Restarts", "short", "Restarts in the last hour, per daemon (changes of process_start_time_seconds).",
			q(fmt.Sprintf(`changes(process_start_time_seconds{%s}[1h]) * %s`, jobInst, fnOf(fn)), "{{instance}}")),
	}
	if !logs {
		return ps
	}
	return append(ps,
		ts("Log messages by level", "short", "Log records written per second, by level (fastpath_log_messages_total). Errors and warnings name their fix: journalctl -p warning -u fastpath-"+fn+"@INSTANCE.",
			q(rate("fastpath_log_messages_total", jobInst, "instance, level"), "{{instance}} {{level}}")).stacked(),
		ts("Log messages suppressed by the rate limit", "short", "Repeats of one message beyond 10 in 10 s are left out of the log and counted here (fastpath_log_messages_suppressed_total); the next line let through says how many (suppressed=N).",
			q(rate("fastpath_log_messages_suppressed_total", jobInst, "instance, level"), "{{instance}} {{level}}")),
		ts("Resident memory", "bytes", "process_resident_memory_bytes of each daemon.",
			q(fmt.Sprintf(`process_resident_memory_bytes{%s} * %s`, jobInst, fnOf(fn)), "{{instance}}")),
		ts("CPU", "percentunit", "CPU time the daemon itself uses (the XDP programs' time is the kernel's and not in it), in cores.",
			q(fmt.Sprintf(`rate(process_cpu_seconds_total{%s}%s) * %s`, jobInst, ri, fnOf(fn)), "{{instance}}")),
	)
}

// devices are the panels every XDP function has: each device's mode, and
// the fill of the tables that can fill.
func devices(fn string, s string) []panel {
	f := "fastpath_" + fn
	return []panel{
		row("Devices and tables"),
		table("XDP mode by device", "Each attached device and the XDP mode it runs ("+f+"_device_attached == 1). generic is the slow path: the kernel builds an skb for every frame first.",
			fmt.Sprintf(`%s_device_attached{%s} == 1`, f, s)),
		fill("Table fill", "Entries over capacity of every hash and LRU map that can fill ("+f+"_map_entries / "+f+"_map_max_entries). The FastpathTableNearFull alert fires above 90 % for 5 minutes.",
			fmt.Sprintf(`%s_map_entries{%s} / %s_map_max_entries{%s}`, f, s, f, s), "{{name}} {{map}}"),
		ts("Table entries", "short", "Entries of each map ("+f+"_map_entries).",
			q(fmt.Sprintf(`%s_map_entries{%s}`, f, s), "{{name}} {{map}}")),
	}
}

func generic(fn, s string) panel {
	return stat("Devices in generic mode", "", "Devices running XDP in generic mode: the slow path (FastpathDeviceGeneric).",
		q(fmt.Sprintf(`count(fastpath_%s_device_attached{%s,mode="generic"} == 1) or vector(0)`, fn, s), ""))
}

func fullest(fn, s string) panel {
	return stat("Fullest table", "percentunit", "The fullest map's entries over its capacity.",
		q(fmt.Sprintf(`max(fastpath_%s_map_entries{%s} / fastpath_%s_map_max_entries{%s})`, fn, s, fn, s), ""))
}

func fnVars(fn string) []variable {
	return []variable{
		{"job", "Job", fmt.Sprintf(`label_values(fastpath_build_info{function="%s"}, job)`, fn)},
		{"instance", "Instance", fmt.Sprintf(`label_values(fastpath_build_info{function="%s",job=~"$job"}, instance)`, fn)},
		{"name", "fastpath instance (--name)", fmt.Sprintf(`label_values(fastpath_%s_map_max_entries{%s}, name)`, fn, jobInst)},
	}
}

// hybrid is every packet the router box took in, per interface: what
// scionproto's router counted (it sees only what XDP passed up) plus what
// XDP handled itself. An interface that only one of the two counts still
// shows.
func hybrid() string {
	r := fmt.Sprintf(`sum by (isd_as, interface) (rate(router_input_pkts_total{isd_as=~"$isd_as"}%s))`, ri)
	f := fmt.Sprintf(`sum by (isd_as, interface) (rate(fastpath_br_input_pkts_total{%s,isd_as=~"$isd_as"}%s))`, sel, ri)
	return fmt.Sprintf("(%s + %s) or %s or %s", r, f, f, r)
}

var dashboards = []dashboard{
	{
		file: "fastpath-overview.json", uid: "fastpath-overview", title: "fastpath / overview",
		desc: "Every fastpath daemon at a glance: which run, what they forward and drop, the slow path, full tables, restarts and alerts.",
		tags: []string{"fastpath"},
		vars: []variable{
			{"job", "Job", `label_values(fastpath_build_info, job)`},
			{"instance", "Instance", `label_values(fastpath_build_info{job=~"$job"}, instance)`},
		},
		restarts: jobInst,
		panels: []panel{
			row("Daemons"),
			stat("Daemons", "", "Daemons serving fastpath_build_info.", q(fmt.Sprintf(`count(fastpath_build_info{%s})`, jobInst), "")),
			stat("Exporters down", "", "Selected targets whose last scrape failed (up == 0): FastpathExporterDown.",
				q(fmt.Sprintf(`count(up{%s} == 0) or vector(0)`, jobInst), "")),
			stat("Alerts firing", "", "fastpath's alerts firing now (ALERTS, from the rules in fastpath-alerts.yml).",
				q(`count(ALERTS{alertname=~"Fastpath.*",alertstate="firing"}) or vector(0)`, "")),
			stat("Devices in generic mode", "", "Devices of every function running XDP in generic mode: the slow path.",
				q(fmt.Sprintf(`count(fastpath_br_device_attached{%[1]s,mode="generic"} == 1 or fastpath_fw_device_attached{%[1]s,mode="generic"} == 1 or fastpath_tra_device_attached{%[1]s,mode="generic"} == 1 or fastpath_rt_device_attached{%[1]s,mode="generic"} == 1) or vector(0)`, jobInst), "")),
			stat("Destinations without a path", "", "Destination ASes the translators talk to but hold no path for (FastpathTranslatorWithoutPath).",
				q(fmt.Sprintf(`sum(fastpath_tra_destinations_without_path{%s}) or vector(0)`, jobInst), "")),
			stat("Restarts in 24 h", "", "Daemon restarts over a day, every function.",
				q(fmt.Sprintf(`sum(changes(process_start_time_seconds{%s}[24h]) * on (job, instance) group_left () fastpath_build_info)`, jobInst), "")),
			table("Daemons and builds", "Each daemon: function, version, commit.", fmt.Sprintf(`fastpath_build_info{%s}`, jobInst)),
			table("Alerts", "fastpath's alerts, pending and firing; what each means and what to do is in docs/monitoring.md.",
				`ALERTS{alertname=~"Fastpath.*"}`),
			row("Traffic"),
			ts("Packets per second by function", "pps", "br: packets XDP handled itself (not those passed up to scionproto's router); fw: every packet once; tra: both directions; rt: every verdict.",
				q(fmt.Sprintf(`sum(rate(fastpath_br_input_pkts_total{%s}%s))`, jobInst, ri), "br"),
				q(fmt.Sprintf(`sum(rate(fastpath_fw_packets_total{%s}%s))`, jobInst, ri), "fw"),
				q(fmt.Sprintf(`sum(rate(fastpath_tra_packets_total{%s}%s))`, jobInst, ri), "tra"),
				q(fmt.Sprintf(`sum(rate(fastpath_rt_packets_total{%s}%s))`, jobInst, ri), "rt")),
			ts("Drops per second by function", "pps", "Packets dropped in XDP (rt: the programs' XDP_DROP and XDP_ABORTED).",
				q(fmt.Sprintf(`sum(rate(fastpath_br_dropped_pkts_total{%s}%s))`, jobInst, ri), "br"),
				q(fmt.Sprintf(`sum(rate(fastpath_fw_dropped_pkts_total{%s}%s))`, jobInst, ri), "fw"),
				q(fmt.Sprintf(`sum(rate(fastpath_tra_dropped_pkts_total{%s}%s))`, jobInst, ri), "tra"),
				q(fmt.Sprintf(`sum(rate(fastpath_rt_packets_total{%s,verdict=~"drop|aborted"}%s))`, jobInst, ri), "rt")),
			ts("Border router: packets passed up to scionproto's router", "pps", "What br's XDP left to the reference router, by reason (docs/operations.md, Counters).",
				q(rate("fastpath_br_passed_pkts_total", jobInst, "reason"), "{{reason}}")).stacked(),
			ts("Fullest table by function", "percentunit", "The fullest map of each function, entries over capacity (fw: connection tracking tables too).",
				q(fmt.Sprintf(`max(fastpath_br_map_entries{%s} / fastpath_br_map_max_entries{%s})`, jobInst, jobInst), "br"),
				q(fmt.Sprintf(`max(fastpath_fw_map_entries{%s} / fastpath_fw_map_max_entries{%s})`, jobInst, jobInst), "fw"),
				q(fmt.Sprintf(`max(fastpath_fw_ct_entries{%s} / fastpath_fw_ct_max_entries{%s})`, jobInst, jobInst), "fw conntrack"),
				q(fmt.Sprintf(`max(fastpath_tra_map_entries{%s} / fastpath_tra_map_max_entries{%s})`, jobInst, jobInst), "tra")),
			row("Logs"),
			ts("Warnings and errors logged", "short", "Log records at warn and error per second, by daemon.",
				q(fmt.Sprintf(`sum by (instance, level) (rate(fastpath_log_messages_total{%s,level=~"warn|error"}%s))`, jobInst, ri), "{{instance}} {{level}}")),
			ts("Log messages suppressed by the rate limit", "short", "Repeats left out of the logs, by daemon and level.",
				q(rate("fastpath_log_messages_suppressed_total", jobInst, "instance, level"), "{{instance}} {{level}}")),
		},
	},
	{
		file: "fastpath-br.json", uid: "fastpath-br", title: "fastpath / br — border router",
		desc:     "fastpath's SCION border router in XDP in front of scionproto's router: traffic in XDP and through the box, drops and passes by reason, devices, tables, the keeper, the process.",
		tags:     []string{"fastpath", "br"},
		vars:     append(fnVars("br"), variable{"isd_as", "ISD-AS", fmt.Sprintf(`label_values(fastpath_br_input_pkts_total{%s}, isd_as)`, sel)}),
		restarts: jobInst,
		panels: concat(
			head("br",
				generic("br", sel),
				stat("Devices not in XDP", "", "Devices br serve does not forward in XDP now (fastpath_br_device_ready == 0): their traffic goes up to scionproto's router (FastpathBRDeviceNotReady).",
					q(fmt.Sprintf(`count(fastpath_br_device_ready{%s} == 0) or vector(0)`, sel), "")),
				stat("Share handled in XDP", "percentunit", "Packets XDP handled itself over every packet the box took in (XDP plus scionproto's router).",
					q(fmt.Sprintf(`sum(rate(fastpath_br_input_pkts_total{%s}%s)) / (sum(rate(fastpath_br_input_pkts_total{%s}%s)) + (sum(rate(router_input_pkts_total{isd_as=~"$isd_as"}%s)) or vector(0)))`, sel, ri, sel, ri, ri), "")),
				fullest("br", sel),
			),
			[]panel{
				row("Traffic"),
				ts("Packets in, XDP and scionproto's router together (hybrid)", "pps", "Every packet the router box took in, by interface: fastpath_br_input_pkts_total (handled in XDP) plus scionproto's router_input_pkts_total (what XDP passed up). Needs scionproto's router scraped too (port 30442).",
					q(hybrid(), "{{isd_as}} {{interface}}")).wide().stacked(),
				ts("Packets in, handled in XDP", "pps", "fastpath_br_input_pkts_total by interface: forwarded or dropped in XDP.",
					q(rate("fastpath_br_input_pkts_total", sel+`,isd_as=~"$isd_as"`, "isd_as, interface"), "{{isd_as}} {{interface}}")),
				ts("Packets forwarded in XDP", "pps", "fastpath_br_output_pkts_total by interface.",
					q(rate("fastpath_br_output_pkts_total", sel+`,isd_as=~"$isd_as"`, "isd_as, interface"), "{{isd_as}} {{interface}}")),
				ts("Bits in and forwarded in XDP", "bps", "fastpath_br_input_bytes_total and fastpath_br_output_bytes_total, in bits per second.",
					q(fmt.Sprintf(`8 * sum by (interface) (rate(fastpath_br_input_bytes_total{%s,isd_as=~"$isd_as"}%s))`, sel, ri), "in {{interface}}"),
					q(fmt.Sprintf(`8 * sum by (interface) (rate(fastpath_br_output_bytes_total{%s,isd_as=~"$isd_as"}%s))`, sel, ri), "out {{interface}}")),
				ts("scionproto's router: packets in and dropped", "pps", "router_input_pkts_total and router_dropped_pkts_total of scionproto's router behind: what XDP passed up.",
					q(`sum by (interface) (rate(router_input_pkts_total{isd_as=~"$isd_as"}`+ri+`))`, "in {{interface}}"),
					q(`sum by (reason) (rate(router_dropped_pkts_total{isd_as=~"$isd_as"}`+ri+`))`, "dropped {{reason}}")),
				row("Drops and passes"),
				ts("Dropped in XDP, by reason", "pps", "fastpath_br_dropped_pkts_total by reason (docs/operations.md, Counters, says what each means and what to do).",
					q(rate("fastpath_br_dropped_pkts_total", sel+`,isd_as=~"$isd_as"`, "reason"), "{{reason}}")).stacked(),
				ts("Dropped in XDP, by interface", "pps", "fastpath_br_dropped_pkts_total by interface and reason.",
					q(rate("fastpath_br_dropped_pkts_total", sel+`,isd_as=~"$isd_as"`, "interface, reason"), "{{interface}} {{reason}}")),
				ts("Passed up to scionproto's router, by reason", "pps", "fastpath_br_passed_pkts_total: packets XDP left to the reference router (not lost: they run at its speed).",
					q(rate("fastpath_br_passed_pkts_total", sel+`,isd_as=~"$isd_as"`, "reason"), "{{reason}}")).stacked(),
				ts("Plain IP forwarding, by verdict", "pps", "fastpath_br_ip_pkts_total: IP packets that are not SCION, by verdict; and fastpath_br_ip_bytes_total in bits per second (right axis).",
					q(rate("fastpath_br_ip_pkts_total", sel, "verdict"), "{{verdict}}"),
					q(fmt.Sprintf(`8 * %s`, rate("fastpath_br_ip_bytes_total", sel, "verdict")), "{{verdict}} bit/s")),
				row("Devices, keeper and tables"),
				ts("Devices forwarded in XDP", "short", "fastpath_br_device_ready: 1 while br serve forwards the device in XDP, 0 when it fell back to scionproto's router (a veth peer without GRO or XDP, a driver that cannot transmit XDP frames).",
					q(fmt.Sprintf(`fastpath_br_device_ready{%s}`, sel), "{{name}} {{device}}")),
				ts("Keeper's map updates, by kind", "ops", "fastpath_br_keeper_changes_total: what br serve changed in the maps as the host changed.",
					q(rate("fastpath_br_keeper_changes_total", sel, "kind"), "{{kind}}")),
				ts("Reloads, by result", "short", "fastpath_br_reloads_total over 5 minutes, ok and error.",
					q(fmt.Sprintf(`sum by (result) (increase(fastpath_br_reloads_total{%s}[5m]))`, sel), "{{result}}")),
			},
			devices("br", sel)[1:],
			tail("br", true),
		),
	},
	{
		file: "fastpath-fw.json", uid: "fastpath-fw", title: "fastpath / fw — firewall",
		desc: "fastpath's XDP firewall: verdicts, drops by reason, events, connection tracking, rules, devices, tables, the process.",
		tags: []string{"fastpath", "fw"},
		vars: fnVars("fw"), restarts: jobInst,
		panels: concat(
			head("fw",
				generic("fw", sel),
				stat("Rules", "", "Rules loaded (fastpath_fw_rules).", q(fmt.Sprintf(`sum(fastpath_fw_rules{%s})`, sel), "")),
				fullest("fw", sel),
				stat("Conntrack fill", "percentunit", "The fullest connection tracking table's entries over capacity.",
					q(fmt.Sprintf(`max(fastpath_fw_ct_entries{%s} / fastpath_fw_ct_max_entries{%s})`, sel, sel), "")),
			),
			[]panel{
				row("Verdicts and drops"),
				ts("Packets, by verdict", "pps", "fastpath_fw_packets_total: every packet once, by verdict.",
					q(rate("fastpath_fw_packets_total", sel, "verdict"), "{{verdict}}")).stacked(),
				ts("Dropped, by reason", "pps", "fastpath_fw_dropped_pkts_total by reason (docs/operations.md, Counters).",
					q(rate("fastpath_fw_dropped_pkts_total", sel, "reason"), "{{reason}}")).stacked(),
				ts("Events", "ops", "fastpath_fw_events_total: what is not a verdict (flow_replaced: the flow table is small for the traffic; rate_limit_trips; ct_promoted).",
					q(rate("fastpath_fw_events_total", sel, "event"), "{{event}}")),
				ts("Top 10 rules, by packets", "pps", "fastpath_fw_rule_packets_total (opt-in: counters per rule), by the rule's name or hash.",
					q(fmt.Sprintf(`topk(10, %s)`, rate("fastpath_fw_rule_packets_total", sel, "rule")), "{{rule}}")),
				ts("Top 10 rules, by bits", "bps", "fastpath_fw_rule_bytes_total (opt-in), in bits per second.",
					q(fmt.Sprintf(`topk(10, 8 * %s)`, rate("fastpath_fw_rule_bytes_total", sel, "rule")), "{{rule}}")),
				ts("Rules loaded and reloads", "short", "fastpath_fw_rules, and fastpath_fw_reloads_total over 5 minutes by result.",
					q(fmt.Sprintf(`sum by (name) (fastpath_fw_rules{%s})`, sel), "rules {{name}}"),
					q(fmt.Sprintf(`sum by (result) (increase(fastpath_fw_reloads_total{%s}[5m]))`, sel), "reloads {{result}}")),
				row("Connection tracking"),
				ts("Conntrack packets, by state", "pps", "fastpath_fw_ct_packets_total by state.",
					q(rate("fastpath_fw_ct_packets_total", sel, "state"), "{{state}}")).stacked(),
				fill("Conntrack table fill", "fastpath_fw_ct_entries / fastpath_fw_ct_max_entries per table (FastpathConntrackTableNearFull above 90 %). A full established table keeps connections in the embryonic one, where they time out sooner.",
					fmt.Sprintf(`fastpath_fw_ct_entries{%s} / fastpath_fw_ct_max_entries{%s}`, sel, sel), "{{name}} {{table}}"),
				ts("Conntrack entries and expired entries", "short", "fastpath_fw_ct_entries and fastpath_fw_ct_expired_entries (waiting for the collector) per table.",
					q(fmt.Sprintf(`sum by (table) (fastpath_fw_ct_entries{%s})`, sel), "{{table}}"),
					q(fmt.Sprintf(`sum by (table) (fastpath_fw_ct_expired_entries{%s})`, sel), "{{table}} expired")),
				ts("TCP connections, by state", "short", "fastpath_fw_ct_tcp_connections.",
					q(fmt.Sprintf(`sum by (state) (fastpath_fw_ct_tcp_connections{%s})`, sel), "{{state}}")).stacked(),
				ts("Conntrack entries collected", "ops", "fastpath_fw_ct_gc_removed_total: expired entries removed per second.",
					q(rate("fastpath_fw_ct_gc_removed_total", sel, "name"), "{{name}}")),
			},
			devices("fw", sel),
			tail("fw", true),
		),
	},
	{
		file: "fastpath-tra.json", uid: "fastpath-tra", title: "fastpath / tra — translator",
		desc: "fastpath's SCION-IP translator: packets by direction and verdict, drops, paths and destinations, the daemon, devices, tables, the process.",
		tags: []string{"fastpath", "tra"},
		vars: fnVars("tra"), restarts: jobInst,
		panels: concat(
			head("tra",
				generic("tra", sel),
				stat("Paths", "", "Paths installed (fastpath_tra_paths).", q(fmt.Sprintf(`sum(fastpath_tra_paths{%s})`, sel), "")),
				stat("Destinations without a path", "", "Destination ASes talked to with no path installed (FastpathTranslatorWithoutPath).",
					q(fmt.Sprintf(`sum(fastpath_tra_destinations_without_path{%s})`, sel), "")),
				fullest("tra", sel),
			),
			[]panel{
				row("Traffic"),
				ts("Packets, by direction and verdict", "pps", "fastpath_tra_packets_total: ip_to_scion and scion_to_ip.",
					q(rate("fastpath_tra_packets_total", sel, "direction, verdict"), "{{direction}} {{verdict}}")),
				ts("Dropped, by reason", "pps", "fastpath_tra_dropped_pkts_total by reason (docs/operations.md, Counters).",
					q(rate("fastpath_tra_dropped_pkts_total", sel, "reason"), "{{reason}}")).stacked(),
				ts("Packets held for a path", "short", "fastpath_tra_held_pkts: packets waiting while the translator asks scionproto's daemon for a path.",
					q(fmt.Sprintf(`sum by (name) (fastpath_tra_held_pkts{%s})`, sel), "{{name}}")),
				row("Paths"),
				ts("Paths and destinations", "short", "fastpath_tra_paths installed, fastpath_tra_destinations talked to, fastpath_tra_destinations_without_path.",
					q(fmt.Sprintf(`sum by (name) (fastpath_tra_paths{%s})`, sel), "paths {{name}}"),
					q(fmt.Sprintf(`sum by (name) (fastpath_tra_destinations{%s})`, sel), "destinations {{name}}"),
					q(fmt.Sprintf(`sum by (name) (fastpath_tra_destinations_without_path{%s})`, sel), "without a path {{name}}")),
				ts("Path changes, by kind", "ops", "fastpath_tra_path_changes_total: installed, refreshed, failover, expired, removed.",
					q(rate("fastpath_tra_path_changes_total", sel, "kind"), "{{kind}}")),
				ts("Path probes, by result", "ops", "fastpath_tra_probes_total.",
					q(rate("fastpath_tra_probes_total", sel, "result"), "{{result}}")),
				ts("Requests to scionproto's daemon, by result", "ops", "fastpath_tra_daemon_requests_total: errors mean the daemon is behind or gone.",
					q(rate("fastpath_tra_daemon_requests_total", sel, "result"), "{{result}}")),
			},
			devices("tra", sel),
			tail("tra", true),
		),
	},
	{
		file: "fastpath-rt.json", uid: "fastpath-rt", title: "fastpath / rt — userspace runtime",
		desc: "fastpath-rt run: XDP programs run in userspace over AF_XDP: verdicts per device and queue, errors, devices, the process.",
		tags: []string{"fastpath", "rt"},
		vars: []variable{
			{"job", "Job", `label_values(fastpath_build_info{function="rt"}, job)`},
			{"instance", "Instance", `label_values(fastpath_build_info{function="rt",job=~"$job"}, instance)`},
			{"device", "Device", `label_values(fastpath_rt_device_attached{job=~"$job",instance=~"$instance"}, device)`},
		},
		restarts: jobInst,
		panels: concat(
			head("rt",
				generic("rt", jobInst+`,device=~"$device"`),
				stat("Zero-copy sockets", "", "AF_XDP sockets bound in zero-copy mode (fastpath_rt_socket_zero_copy), of all the runtime's sockets: copy mode costs a copy of every frame.",
					q(fmt.Sprintf(`sum(fastpath_rt_socket_zero_copy{%[1]s,device=~"$device"}) or vector(0)`, jobInst), "")),
				stat("Aborted", "pps", "Frames the program ended with XDP_ABORTED (a bug in the program, or a runtime error).",
					q(fmt.Sprintf(`sum(rate(fastpath_rt_packets_total{%s,device=~"$device",verdict="aborted"}%s))`, jobInst, ri), "")),
			),
			[]panel{
				row("Traffic"),
				ts("Packets, by verdict", "pps", "fastpath_rt_packets_total: pass, drop, tx, redirect, aborted.",
					q(rate("fastpath_rt_packets_total", jobInst+`,device=~"$device"`, "verdict"), "{{verdict}}")).stacked(),
				ts("Packets, by device and queue", "pps", "fastpath_rt_packets_total per AF_XDP socket (one thread per queue).",
					q(rate("fastpath_rt_packets_total", jobInst+`,device=~"$device"`, "device, queue"), "{{device}} {{queue}}")),
				ts("Bits, by verdict", "bps", "fastpath_rt_bytes_total in bits per second, by the program's verdict.",
					q(fmt.Sprintf(`8 * sum by (verdict) (rate(fastpath_rt_bytes_total{%s,device=~"$device"}%s))`, jobInst, ri), "{{verdict}}")).stacked(),
				ts("Errors, by kind", "ops", "fastpath_rt_errors_total per device and kind.",
					q(rate("fastpath_rt_errors_total", jobInst+`,device=~"$device"`, "device, kind"), "{{device}} {{kind}}")),
				table("XDP mode by device", "fastpath_rt_device_attached == 1: the mode of the AF_XDP sockets' XDP program (generic: the kernel copies every frame).",
					fmt.Sprintf(`fastpath_rt_device_attached{%s,device=~"$device"} == 1`, jobInst)),
			},
			tail("rt", false),
		),
	},
}

func concat(pss ...[]panel) []panel {
	var out []panel
	for _, ps := range pss {
		out = append(out, ps...)
	}
	return out
}

// render makes the Grafana JSON of a dashboard: schemaVersion 39 (Grafana
// 10.4 and 11), panels laid out left to right in rows of 24 columns.
func render(d dashboard) ([]byte, error) {
	vars := []any{map[string]any{
		"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
		"current": map[string]any{}, "hide": 0, "options": []any{}, "refresh": 1, "regex": "",
	}}
	for _, v := range d.vars {
		vars = append(vars, map[string]any{
			"name": v.name, "label": v.label, "type": "query", "datasource": ds,
			"query": v.query, "definition": v.query,
			// Refreshed when the time range changes; "All" is every value
			// found (no allValue: .* would take in every job's series).
			"refresh": 2, "includeAll": true, "multi": true, "sort": 1,
			"current": map[string]any{}, "hide": 0, "options": []any{}, "regex": "",
		})
	}
	var panels []any
	x, y, rowH := 0, 0, 0
	for i, p := range d.panels {
		if p.row || x+p.w > 24 {
			x, y, rowH = 0, y+rowH, 0
		}
		gp := map[string]any{"x": x, "y": y, "w": p.w, "h": p.h}
		x += p.w
		if p.h > rowH {
			rowH = p.h
		}
		if p.row {
			panels = append(panels, map[string]any{"id": i + 1, "type": "row", "title": p.title, "collapsed": false, "gridPos": gp, "panels": []any{}})
			continue
		}
		var targets []any
		for j, t := range p.targets {
			tj := map[string]any{"refId": string(rune('A' + j)), "datasource": ds, "expr": t.expr, "legendFormat": t.legend, "range": !t.instant, "instant": t.instant}
			if t.legend == "" {
				tj["legendFormat"] = "__auto"
			}
			if t.table {
				tj["format"] = "table"
			}
			targets = append(targets, tj)
		}
		defaults := map[string]any{"unit": p.unit}
		if p.unit == "" {
			defaults["unit"] = "short"
		}
		var options map[string]any
		switch p.kind {
		case "timeseries":
			stacking := "none"
			if p.stack {
				stacking = "normal"
			}
			defaults["min"] = 0
			defaults["custom"] = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false, "stacking": map[string]any{"mode": stacking, "group": "A"}}
			options = map[string]any{
				"legend":  map[string]any{"displayMode": "table", "placement": "bottom", "showLegend": true, "calcs": []any{"mean", "max", "lastNotNull"}},
				"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
			}
		case "stat":
			options = map[string]any{
				"reduceOptions": map[string]any{"calcs": []any{"lastNotNull"}, "fields": "", "values": false},
				"colorMode":     "value", "graphMode": "none", "justifyMode": "auto", "textMode": "auto", "orientation": "auto",
			}
			if strings.HasPrefix(p.title, "Version") {
				options["textMode"] = "name"
			}
			defaults["color"] = map[string]any{"mode": "thresholds"}
			defaults["thresholds"] = map[string]any{"mode": "absolute", "steps": []any{map[string]any{"color": "green", "value": nil}}}
		case "bargauge":
			defaults["min"], defaults["max"] = 0, *p.max
			defaults["color"] = map[string]any{"mode": "thresholds"}
			defaults["thresholds"] = map[string]any{"mode": "absolute", "steps": []any{
				map[string]any{"color": "green", "value": nil}, map[string]any{"color": "yellow", "value": 0.8}, map[string]any{"color": "red", "value": 0.9}}}
			options = map[string]any{
				"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": true,
				"reduceOptions": map[string]any{"calcs": []any{"lastNotNull"}, "fields": "", "values": false},
			}
		case "table":
			options = map[string]any{"showHeader": true, "cellHeight": "sm"}
		}
		overrides := []any{}
		for _, t := range p.targets {
			// A series in bits beside packets: on its own axis, at the right.
			if strings.HasSuffix(t.legend, " bit/s") && p.unit != "bps" {
				overrides = append(overrides, map[string]any{
					"matcher": map[string]any{"id": "byRegexp", "options": "/ bit\\/s$/"},
					"properties": []any{
						map[string]any{"id": "unit", "value": "bps"},
						map[string]any{"id": "custom.axisPlacement", "value": "right"},
						map[string]any{"id": "custom.stacking", "value": map[string]any{"mode": "none", "group": "B"}},
					},
				})
				break
			}
		}
		pj := map[string]any{
			"id": i + 1, "type": p.kind, "title": p.title, "description": p.desc, "datasource": ds, "gridPos": gp,
			"targets": targets, "fieldConfig": map[string]any{"defaults": defaults, "overrides": overrides}, "options": options,
		}
		if p.kind == "table" {
			pj["transformations"] = []any{map[string]any{"id": "organize", "options": map[string]any{
				"excludeByName": map[string]any{"Time": true, "Value": true, "__name__": true}}}}
		}
		panels = append(panels, pj)
	}
	out := map[string]any{
		"title": d.title, "uid": d.uid, "description": d.desc, "tags": d.tags,
		"schemaVersion": 39, "version": 1, "editable": true, "graphTooltip": 1,
		"time": map[string]any{"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "", "timepicker": map[string]any{},
		"fiscalYearStartMonth": 0, "liveNow": false, "weekStart": "",
		"links": []any{map[string]any{"title": "fastpath", "type": "dashboards", "tags": []any{"fastpath"}, "asDropdown": true, "includeVars": false, "keepTime": true, "icon": "external link", "targetBlank": false}},
		"annotations": map[string]any{"list": []any{
			map[string]any{
				"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"}, "enable": true, "hide": true,
				"iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
			},
			map[string]any{
				"name": "Restarts", "datasource": ds, "enable": true, "hide": false, "iconColor": "orange",
				"expr": fmt.Sprintf(`changes(process_start_time_seconds{%s}[2m]) * on (job, instance) group_left () fastpath_build_info > 0`, d.restarts),
				"step": "60s", "titleFormat": "restart", "textFormat": "{{instance}} restarted",
				"useValueForTime": false,
			},
		}},
		"templating": map[string]any{"list": vars},
		"panels":     panels,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func TestDashboardsGenerated(t *testing.T) {
	bless := os.Getenv("FASTPATH_BLESS") != ""
	want := map[string]bool{}
	for _, d := range dashboards {
		b, err := render(d)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join("grafana", d.file)
		want[f] = true
		if bless {
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(f)
		if err != nil || !bytes.Equal(have, b) {
			t.Errorf("%s is not what dashboards_test.go makes of it: FASTPATH_BLESS=1 go test ./deploy/monitoring/ rewrites it (%v)", f, err)
		}
	}
	files, _ := filepath.Glob("grafana/*.json")
	for _, f := range files {
		if !want[f] {
			t.Errorf("%s is no dashboard of dashboards_test.go: remove it or add it there", f)
		}
	}
}
