package scionlab

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/scionproto/scion/pkg/slayers/path"
)

// generate writes what every service of the plan reads: the crypto from
// scion-pki testcrypto (a fresh ISD each time: TRC, CA, AS certificates),
// each AS's topology.json, master keys, TRCs and the services' TOML files,
// and fastpath's border router configuration beside the reference's.
func (n Network) generate(pki string, as []AS, links []Link, o genOptions) error {
	gen := filepath.Join(n.Dir, "gen")
	if err := os.RemoveAll(gen); err != nil {
		return err
	}
	if err := os.MkdirAll(gen, 0o755); err != nil {
		return err
	}
	// The plan's trust: a .topo file's, or in the default network the core
	// AS votes, is authoritative and issues every leaf's certificate.
	trust := o.trust
	if trust == nil {
		trust = &Topo{Path: "the lab's network"}
		for _, a := range as {
			ta := TopoAS{IA: a.IA, Core: a.Core, Voting: a.Core, Authoritative: a.Core, Issuing: a.Core}
			if !a.Core {
				ta.CertIssuer = as[0].IA
			}
			trust.ASes = append(trust.ASes, ta)
		}
	}
	trcs, err := GenerateCrypto(pki, trust, gen)
	if err != nil {
		return err
	}
	for _, a := range as {
		if err := n.writeAS(a, as, links, trcs, o); err != nil {
			return fmt.Errorf("AS %s: %w", a.IA, err)
		}
	}
	return nil
}

// genOptions are what up's options change in the generated files.
type genOptions struct {
	bfd bool
	// mtu is the links' MTU; the topology files give the SCION MTU it
	// leaves (SCIONMTU), which the control services put in every path's
	// metadata.
	mtu int
	// hopExpTime, if set, caps the ExpTime of the hop fields every control
	// service adds (beaconing policies); nil leaves scionproto's default.
	hopExpTime *uint8
	// trust, if set, is the .topo network whose ISDs testcrypto makes.
	trust *Topo
	// version is the scionproto release the files are for.
	version string
}

func (n Network) writeAS(a AS, as []AS, links []Link, trcs []string, o genOptions) error {
	for _, d := range []string{"keys", "certs", "db"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, t := range trcs {
		b, err := os.ReadFile(t)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(a.Dir, "certs", filepath.Base(t)), b, 0o644); err != nil {
			return err
		}
	}
	// The router and the control service both derive the hop-field key
	// from master0.key; the router insists on master1.key too.
	for _, k := range []string{"master0.key", "master1.key"} {
		key := make([]byte, 16)
		rand.Read(key)
		if err := os.WriteFile(filepath.Join(a.Dir, "keys", k), []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(topology(a, as, links, o.mtu, o.version), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "topology.json"), b, 0o644); err != nil {
		return err
	}
	cs := netip.AddrPortFrom(a.Internal, ControlPort).String()
	files := map[string]string{
		"cs.toml": fmt.Sprintf("[general]\nid = %q\nconfig_dir = %q\n\n[log.console]\nlevel = \"info\"\n\n"+
			"[trust_db]\nconnection = %q\n\n[beacon_db]\nconnection = %q\n\n[path_db]\nconnection = %q\n",
			a.ControlID(), a.Dir, filepath.Join(a.Dir, "db", "cs.trust.db"), filepath.Join(a.Dir, "db", "cs.beacon.db"), filepath.Join(a.Dir, "db", "cs.path.db")),
		"sd.toml": fmt.Sprintf("[general]\nid = %q\nconfig_dir = %q\n\n[log.console]\nlevel = \"info\"\n\n"+
			"[trust_db]\nconnection = %q\n\n[path_db]\nconnection = %q\n\n[sd]\naddress = %q\n",
			"sd"+a.fileIA(), a.Dir, filepath.Join(a.Dir, "db", "sd.trust.db"), filepath.Join(a.Dir, "db", "sd.path.db"), a.Daemon().String()),
		// The AS's own shim: v0.12.0's router hands packets for the control
		// service's SVC addresses (beacons come that way) to 30041, as the
		// control service's port lies outside dispatched_ports; the shim
		// forwards them there, and answers SCMP echo for the AS. From
		// v0.14.0 the router sends them to the control service's port
		// itself, and the shim only answers echo.
		"dispatcher-as.toml": fmt.Sprintf("[dispatcher]\nid = %q\nlocal_udp_forwarding = true\nunderlay_addr = %q\n\n[dispatcher.service_addresses]\n%q = %q\n%q = %q\n\n[log.console]\nlevel = \"info\"\n",
			"disp-as"+a.fileIA(), a.Internal.String(), a.IA.String()+",CS", cs, a.IA.String()+",DS", cs),
		// The end host's shim answers SCMP echo and traceroute on 30041.
		"dispatcher.toml": fmt.Sprintf("[dispatcher]\nid = %q\nunderlay_addr = %q\n\n[log.console]\nlevel = \"info\"\n", "disp"+a.fileIA(), a.Host.String()),
	}
	for k, r := range a.Routers {
		// Metrics tell whether BFD holds each interface up.
		br := fmt.Sprintf("[general]\nid = %q\nconfig_dir = %q\n\n[log.console]\nlevel = \"info\"\n\n[metrics]\nprometheus = %q\n",
			r.ID, a.Dir, netip.AddrPortFrom(r.Internal, RouterMetricsPort).String())
		if !o.bfd {
			br += "\n[router.bfd]\ndisable = true\n"
		}
		files[routerFile("br", k)] = br
		// fastpath's router in front of the reference, on the same files.
		files[routerFile("fastpath-br", k)] = fmt.Sprintf("# fastpath's XDP border router in front of scionproto %s's router %s:\n# the same topology.json and keys.\nrouter_id = %q\ntopology = \"topology.json\"\nkeys = \"keys\"\nscion_version = %q\n", o.version, r.ID, r.ID, o.version)
	}
	if a.Core {
		files["cs.toml"] += "\n[ca]\nmode = \"in-process\"\n"
	}
	if o.hopExpTime != nil {
		policies := beaconPolicies(a, *o.hopExpTime)
		files["cs.toml"] += policiesTOML(a.Dir, policies)
		for _, p := range policies {
			files[p.file] = p.body
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(a.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// routerFile names the configuration of router k of an AS: br.toml and
// fastpath-br.toml for the first (the default network has only it),
// br-2.toml, fastpath-br-2.toml, … for the others.
func routerFile(kind string, k int) string {
	if k == 0 {
		return kind + ".toml"
	}
	return fmt.Sprintf("%s-%d.toml", kind, k+1)
}

// topology.json's link_to of a link's interfaces by the link's type: at its
// first end ("parent") and at its second ("child").
var (
	linkToFromParent = map[string]string{LinkChild: "child", LinkCore: "core", LinkPeer: "peer"}
	linkToFromChild  = map[string]string{LinkChild: "parent", LinkCore: "core", LinkPeer: "peer"}
)

// topology is an AS's topology.json, as scionproto's generator writes it:
// every router of the AS with its interfaces, the AS's MTU and each
// interface's (in the default network, the SCION MTU the links' MTU
// leaves), a peer interface with its remote interface ID.
func topology(a AS, as []AS, links []Link, mtu int, version string) map[string]any {
	attrs := []string{}
	if a.Core {
		attrs = append(attrs, "core")
	}
	ifs := make([]map[string]any, len(a.Routers))
	for k := range ifs {
		ifs[k] = map[string]any{}
	}
	for _, l := range links {
		var id, remoteID uint16
		var local, remote string
		var other AS
		var linkTo string
		var k int
		switch a.Index {
		case l.Parent:
			id, remoteID, local, remote, other, k = l.ParentIf, l.ChildIf, l.ParentAddr.String(), l.ChildAddr.String(), as[l.Child], l.ParentRouter
			linkTo = linkToFromParent[l.Type]
		case l.Child:
			id, remoteID, local, remote, other, k = l.ChildIf, l.ParentIf, l.ChildAddr.String(), l.ParentAddr.String(), as[l.Parent], l.ChildRouter
			linkTo = linkToFromChild[l.Type]
		default:
			continue
		}
		ifMTU := l.SCIONMTU
		if ifMTU == 0 {
			ifMTU = SCIONMTU(mtu)
		}
		intf := map[string]any{
			"underlay": map[string]string{"local": local, "remote": remote},
			"isd_as":   other.IA.String(),
			"link_to":  linkTo,
			"mtu":      TopoMTU(version, ifMTU),
		}
		if l.Type == LinkPeer {
			intf["remote_interface_id"] = remoteID
		}
		ifs[k][fmt.Sprint(id)] = intf
	}
	routers := map[string]any{}
	for k, r := range a.Routers {
		routers[r.ID] = map[string]any{
			"internal_addr": r.RouterInternal().String(),
			"interfaces":    ifs[k],
		}
	}
	asMTU := a.MTU
	if asMTU == 0 {
		asMTU = SCIONMTU(mtu)
	}
	cs := map[string]any{a.ControlID(): map[string]string{"addr": netip.AddrPortFrom(a.Internal, ControlPort).String()}}
	return map[string]any{
		"attributes":        attrs,
		"isd_as":            a.IA.String(),
		"mtu":               TopoMTU(version, asMTU),
		"dispatched_ports":  DispatchedPorts,
		"control_service":   cs,
		"discovery_service": cs,
		"border_routers":    routers,
	}
}

// HopExpiryUnit is scionproto's unit of hop-field lifetime: a hop field
// with ExpTime e is valid for (1+e) units after its segment's timestamp.
const HopExpiryUnit = path.MaxTTL / 256 // 337.5 s

// HopExpTime is the smallest ExpTime whose lifetime is at least d: the
// hop fields live no shorter than asked, and no more than one unit longer.
// scionproto's own ExpTimeFromDuration rounds down instead, which would
// make a --hop-expiry of 6m give 337.5 s.
func HopExpTime(d time.Duration) (uint8, error) {
	if d < HopExpiryUnit || d > path.MaxTTL {
		return 0, fmt.Errorf("--hop-expiry %s: a hop field lives from %s (ExpTime 0) to %s (ExpTime 255), in steps of %s; give a duration in that range (0 for scionproto's default, %s)",
			d, HopExpiryUnit, path.MaxTTL, HopExpiryUnit, path.ExpTimeToDuration(defaultHopExpTime))
	}
	units := (d + HopExpiryUnit - 1) / HopExpiryUnit
	return uint8(units - 1), nil
}

// defaultHopExpTime is control/beacon.DefaultMaxExpTime of scionproto
// (6 h in every supported release); the control package itself is too heavy to import for it.
const defaultHopExpTime = 63

// beaconPolicy is one beaconing policy file of an AS's control service and
// the cs.toml key under [beaconing.policies] that names it.
type beaconPolicy struct {
	key, file, body string
}

// policyKeys are the policies a control service loads, by cs.toml key and
// the Type its YAML file must carry: a core AS loads propagation and
// core_registration, a leaf propagation, up_registration and
// down_registration (control/policy.go); a core AS ignores the leaf keys
// and a leaf the core key, so only those read are written.
var policyKeys = []struct {
	key, typ   string
	core, leaf bool
}{
	{"propagation", "Propagation", true, true},
	{"core_registration", "CoreSegmentRegistration", true, false},
	{"up_registration", "UpSegmentRegistration", false, true},
	{"down_registration", "DownSegmentRegistration", false, true},
}

// beaconPolicies cap the ExpTime of every hop field the AS's control
// service makes (originated, propagated or registered) at expTime: the
// one place scionproto lets it be set is a policy's MaxExpTime
// (control/beacon/policy.go). Everything else keeps its default.
func beaconPolicies(a AS, expTime uint8) []beaconPolicy {
	var out []beaconPolicy
	for _, k := range policyKeys {
		if (a.Core && !k.core) || (!a.Core && !k.leaf) {
			continue
		}
		out = append(out, beaconPolicy{
			key:  k.key,
			file: "policy-" + k.key + ".yaml",
			body: fmt.Sprintf("# the lab's --hop-expiry: hop fields this AS adds live %s (ExpTime %d)\nType: %s\nMaxExpTime: %d\n",
				path.ExpTimeToDuration(expTime), expTime, k.typ, expTime),
		})
	}
	return out
}

// policiesTOML is the section of cs.toml that names the policy files
// (BSConfig.Policies, `toml:"beaconing"` then `toml:"policies"`, in
// control/config/config.go).
func policiesTOML(dir string, ps []beaconPolicy) string {
	var b strings.Builder
	b.WriteString("\n[beaconing.policies]\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "%s = %q\n", p.key, filepath.Join(dir, p.file))
	}
	return b.String()
}
