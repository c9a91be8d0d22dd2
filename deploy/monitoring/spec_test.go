package monitoring

import "strings"

// SpecFamilies are the metric families fastpath's exporters serve, with
// their labels (docs/monitoring.md, Metrics; each function's page has the
// detail): the only fastpath_* names a dashboard or alert may use. The
// fake exporters of the live test serve exactly these.
var SpecFamilies = func() map[string][]string {
	m := map[string][]string{
		"fastpath_build_info":                    {"version", "commit", "goversion", "function"},
		"fastpath_log_messages_total":            {"level"},
		"fastpath_log_messages_suppressed_total": {"level"},
		"fastpath_rt_device_attached":            {"device", "mode"},
		"fastpath_rt_packets_total":              {"device", "queue", "verdict"},
		"fastpath_rt_errors_total":               {"device", "kind"},
		"fastpath_rt_bytes_total":                {"device", "queue", "verdict"},
		"fastpath_rt_socket_zero_copy":           {"device", "queue"},
		"fastpath_br_input_pkts_total":           {"name", "isd_as", "interface", "neighbor_isd_as"},
		"fastpath_br_input_bytes_total":          {"name", "isd_as", "interface", "neighbor_isd_as"},
		"fastpath_br_output_pkts_total":          {"name", "isd_as", "interface", "neighbor_isd_as"},
		"fastpath_br_output_bytes_total":         {"name", "isd_as", "interface", "neighbor_isd_as"},
		"fastpath_br_dropped_pkts_total":         {"name", "isd_as", "interface", "neighbor_isd_as", "reason"},
		"fastpath_br_passed_pkts_total":          {"name", "isd_as", "interface", "neighbor_isd_as", "reason"},
		"fastpath_br_ip_pkts_total":              {"name", "verdict"},
		"fastpath_br_ip_bytes_total":             {"name", "verdict"},
		"fastpath_br_device_ready":               {"name", "device"},
		"fastpath_br_keeper_changes_total":       {"name", "kind"},
		"fastpath_br_reloads_total":              {"name", "result"},
		"fastpath_fw_packets_total":              {"name", "verdict"},
		"fastpath_fw_dropped_pkts_total":         {"name", "reason"},
		"fastpath_fw_events_total":               {"name", "event"},
		"fastpath_fw_ct_packets_total":           {"name", "state"},
		"fastpath_fw_ct_entries":                 {"name", "table"},
		"fastpath_fw_ct_max_entries":             {"name", "table"},
		"fastpath_fw_ct_expired_entries":         {"name", "table"},
		"fastpath_fw_ct_tcp_connections":         {"name", "state"},
		"fastpath_fw_ct_gc_removed_total":        {"name"},
		"fastpath_fw_rule_packets_total":         {"name", "rule"},
		"fastpath_fw_rule_bytes_total":           {"name", "rule"},
		"fastpath_fw_rules":                      {"name"},
		"fastpath_fw_reloads_total":              {"name", "result"},
		"fastpath_tra_packets_total":             {"name", "direction", "verdict"},
		"fastpath_tra_dropped_pkts_total":        {"name", "reason"},
		"fastpath_tra_paths":                     {"name"},
		"fastpath_tra_destinations":              {"name"},
		"fastpath_tra_destinations_without_path": {"name"},
		"fastpath_tra_path_changes_total":        {"name", "kind"},
		"fastpath_tra_probes_total":              {"name", "result"},
		"fastpath_tra_daemon_requests_total":     {"name", "result"},
		"fastpath_tra_held_pkts":                 {"name"},
	}
	for _, fn := range []string{"br", "fw", "tra"} {
		m["fastpath_"+fn+"_device_attached"] = []string{"name", "device", "mode"}
		m["fastpath_"+fn+"_map_entries"] = []string{"name", "map"}
		m["fastpath_"+fn+"_map_max_entries"] = []string{"name", "map"}
	}
	return m
}()

// RouterFamilies are scionproto's router's families the dashboards use
// beside fastpath's (router/metrics.go), with their labels.
var RouterFamilies = map[string][]string{
	"router_input_pkts_total":   {"interface", "isd_as", "neighbor_isd_as", "sizeclass"},
	"router_dropped_pkts_total": {"interface", "isd_as", "neighbor_isd_as", "sizeclass", "reason"},
}

// Function is the function a fastpath family belongs to ("" for obs's).
func Function(family string) string {
	for _, fn := range []string{"br", "fw", "tra", "rt"} {
		if strings.HasPrefix(family, "fastpath_"+fn+"_") {
			return fn
		}
	}
	return ""
}
