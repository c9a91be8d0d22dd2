package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// labScionCmd is `fastpath lab scion`: a real SCION network of
// scionproto's own services in the lab's namespaces.
func labScionCmd(prefix *string) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "scion",
		Short: "a SCION network of scionproto's router, control service and daemon, an AS per namespace",
		Long: `A SCION network in network namespaces: one core AS (1-64512) and its leaf ASes
(1-64513, ...), each running scionproto's router, control service and daemon
(` + scionproto.Default + ` unless --scion-version names another of ` + strings.Join(scionproto.Versions, ", ") + `),
joined by veth pairs, each with an internal network (a veth) to an end host in a
namespace of its own that runs the dispatcher shim (it answers scion ping). The
programs are built once from the Go module proxy; the crypto is made fresh by
scion-pki testcrypto at each up. See docs/scion-lab.md.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "", "where the configuration, crypto, databases, logs and the record of the running network live (default "+scionlab.DefaultDir+", or "+scionlab.DefaultDir+"-PREFIX for another --prefix)")
	network := func() (scionlab.Network, error) {
		n := scionlab.Network{Prefix: *prefix, Dir: scionDir(dir, *prefix)}
		if err := n.Validate(); err != nil {
			return n, err
		}
		return n, preflight.Root()
	}

	var (
		ases         int
		scionVersion string
		hybrid       bool
		sig          bool
		timeout      time.Duration
		nlinks       int
		hopExpiry    time.Duration
		mtu          int
		topoFile     string
		renumber     bool
		devices      string
	)
	up := &cobra.Command{
		Use:   "up [--ases N] [--links 2] [--hybrid] [--sig] [--hop-expiry DURATION] [--mtu 9000] [--topo FILE.topo [--renumber]] [--devices KIND[,IA#IFID=KIND,...]]",
		Short: "build the network, start its services and wait for paths",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := network()
			if err != nil {
				return err
			}
			if hybrid {
				if err := preflight.BPF(); err != nil {
					return err
				}
			}
			devs, err := scionlab.ParseDevices(devices)
			if err != nil {
				return err
			}
			var topo *scionlab.Topo
			var as []scionlab.AS
			var links []scionlab.Link
			if topoFile != "" {
				for _, f := range []string{"ases", "links", "mtu", "sig"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s does not go with --topo: the .topo file gives the ASes, links and MTUs (and --sig runs on the default network)", f)
					}
				}
				if topo, err = scionlab.ReadTopo(topoFile); err != nil {
					return err
				}
				if renumber {
					if topo, _, err = topo.Renumber(scionlab.FirstASN); err != nil {
						return err
					}
				}
				if as, links, err = n.PlanTopo(topo); err != nil {
					return err
				}
			} else if renumber {
				return fmt.Errorf("--renumber renumbers the ASes of a --topo file; the default network's are BGP-style already")
			} else if as, links, err = n.PlanLinks(ases, nlinks); err != nil {
				return err
			}
			if err := devs.Apply(as, links); err != nil {
				return err
			}
			if hopExpiry != 0 {
				if _, err := scionlab.HopExpTime(hopExpiry); err != nil {
					return err
				}
			}
			if err := scionlab.CheckMTU(mtu); err != nil {
				return err
			}
			if err := scionproto.Check(scionVersion); err != nil {
				return fmt.Errorf("--scion-version: %w", err)
			}
			if _, err := n.Up(cmd.Context(), scionlab.UpOptions{Version: scionVersion, ASes: ases, Links: nlinks, Hybrid: hybrid, HopExpiry: hopExpiry, MTU: mtu, Timeout: timeout, Topo: topo, Renumber: renumber, Devices: devices, Log: os.Stderr}); err != nil {
				return err
			}
			if sig {
				as, _, err := n.ASes()
				if err != nil {
					return err
				}
				if err := n.StartSIG(cmd.Context(), as[1], as[len(as)-1], timeout, os.Stderr); err != nil {
					return err
				}
			}
			st, err := n.Status()
			if err != nil {
				return err
			}
			st.Write(os.Stdout)
			return nil
		},
	}
	up.Flags().StringVar(&scionVersion, "scion-version", scionproto.Default, "the scionproto release whose programs run the network ("+strings.Join(scionproto.Versions, ", ")+"), each built once per machine; fastpath's routers (--hybrid) behave as that release's")
	up.RegisterFlagCompletionFunc("scion-version", completeVersions)
	up.Flags().IntVar(&ases, "ases", scionlab.DefaultASes, "number of ASes: one core and N-1 leaves")
	up.Flags().IntVar(&nlinks, "links", 1, fmt.Sprintf("links from each leaf to the core (up to %d: two give every pair of leaves four paths, for failover)", scionlab.MaxParallel))
	up.Flags().BoolVar(&hybrid, "hybrid", false, "put fastpath's border router in front of every AS's reference router, core first, each kept by a fastpath br serve")
	up.Flags().BoolVar(&sig, "sig", false, "also run scionproto's SCION-IP gateway on the end hosts of the first and last leaf AS (addresses 10.(200+i).0.1 and fd00:5c:i::1 behind them, i the AS's index)")
	up.Flags().DurationVar(&hopExpiry, "hop-expiry", 0, "how long the hop fields of every path live, rounded up to a multiple of 337.5s (337.5s to 24h; 0: scionproto's default, 6h)")
	up.Flags().IntVar(&mtu, "mtu", scionlab.DefaultMTU, fmt.Sprintf("MTU of every link (inter-AS, internal networks, end hosts), %d to %d; the topology files say %d less (the IPv4/UDP underlay)", scionlab.MinMTU, scionlab.MaxMTU, scionlab.UnderlayOverhead))
	up.Flags().StringVar(&topoFile, "topo", "", "build the network of a .topo file (scionproto's format; the lab's own: "+strings.Join(scionlab.ShippedTopos(), ", ")+") instead of the default one: a namespace per border router, a switch where an AS has several, IPv6 underlays and MTUs as the file says")
	up.Flags().StringVar(&devices, "devices", "veth", "which kind of device holds each address of the links and internal networks: veth (on the veth itself), bridge (on a Linux bridge, the veth a port), macvlan (on a macvlan in bridge mode over the veth) or vxlan (on a VXLAN device whose underlay, 172.16.0.0/12, is the veth); for one AS IA=KIND, one of its link ends IA#IFID=KIND, its internal network IA#internal=KIND; later rules win, e.g. veth,1-64512#2=bridge")
	up.Flags().BoolVar(&renumber, "renumber", false, "with --topo: give the ASes BGP-style numbers from 64512 on (SM-IP addresses for their hosts)")
	up.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the first path (and for the SIG to carry traffic)")

	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "the ASes, their addresses and processes; exits 1 if one is down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := network()
			if err != nil {
				return err
			}
			st, err := n.Status()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else {
				st.Write(os.Stdout)
			}
			if !st.Healthy() {
				return fmt.Errorf("a process of the network is down: see its log")
			}
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	check := &cobra.Command{
		Use:         "check",
		Annotations: map[string]string{noJSON: "it runs scionproto's scion showpaths, ping and traceroute and prints what they print"},
		Short:       "scion showpaths, ping and traceroute between the end hosts of two leaf ASes",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := network()
			if err != nil {
				return err
			}
			return n.Check(cmd.Context(), os.Stdout)
		},
	}

	down := &cobra.Command{
		Use:   "down",
		Short: "stop the services, detach fastpath from the network and remove all it made (also after a crash)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := network()
			if err != nil {
				return err
			}
			return n.Down(os.Stderr)
		},
	}
	restart := &cobra.Command{
		Use:   "restart IA SERVICE",
		Short: "stop an AS's router, control service, daemon or fastpath-br and start it again as up did",
		Long: `Stop one service of an AS (router, control, daemon, or with --hybrid fastpath-br,
the fastpath br serve that keeps fastpath's router in front of the AS's) and start
it again with the same arguments, in the same namespace, appending to the same log;
the record gets its new PID. Its databases stay. fastpath's router in front of a
restarted reference router stays attached, and so it does while its fastpath-br
restarts (the new one attaches again in place). In an AS with several border routers
(lab scion up --topo), router-N and fastpath-br-N name its Nth. Example:
fastpath lab scion restart 1-64513 control`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := scionlab.CheckService(args[1]); err != nil {
				return err
			}
			n, err := network()
			if err != nil {
				return err
			}
			a, err := n.FindAS(args[0])
			if err != nil {
				return err
			}
			return n.Restart(cmd.Context(), a, args[1], os.Stderr)
		},
	}

	link := &cobra.Command{
		Use:   "link IA IFID up|down",
		Short: "take an AS's end of an inter-AS link down or up (its veth), as a cut cable",
		Long: `Set the veth of an AS's SCION interface down or up, at that AS's end only: the
routers on both sides see their BFD sessions fail, as on a cut cable, and report
the interface down (router_interface_up in their metrics). Example:
fastpath lab scion link 1-64513 1 down`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ifid, err := strconv.ParseUint(args[1], 10, 16)
			if err != nil || ifid == 0 {
				return fmt.Errorf("interface %q: give the AS's SCION interface ID, a number from 1 (as in its topology.json)", args[1])
			}
			var up bool
			switch args[2] {
			case "up":
				up = true
			case "down":
			default:
				return fmt.Errorf("%q: say up or down", args[2])
			}
			n, err := network()
			if err != nil {
				return err
			}
			a, err := n.FindAS(args[0])
			if err != nil {
				return err
			}
			return n.SetLink(a, uint16(ifid), up)
		},
	}
	var topoRenumber bool
	topo := &cobra.Command{
		Use:   "topo FILE.topo|" + strings.Join(scionlab.ShippedTopos(), "|") + " [--renumber]",
		Short: "read a network in scionproto's .topo format, check it and show how the lab lays it out",
		Long: `Reads a .topo file (scionproto's format: ASes with core, voting, authoritative, issuing,
cert_issuer, mtu and underlay; links "ISD-AS[-ROUTER]#IFID" with linkAtoB CORE, CHILD or PEER,
mtu and underlay), checks it whole — every error names the line and what to do — and prints
each AS's border routers as scionproto's generator names them, with their interfaces. The
lab's own files: ` + strings.Join(scionlab.ShippedTopos(), ", ") + `. --renumber gives the ASes BGP-style
numbers from 64512 on, so that their hosts have SCION-mapped IPv6 addresses. lab scion up
--topo builds it. See docs/scion-lab.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := scionlab.ReadTopo(args[0])
			if err != nil {
				return err
			}
			if topoRenumber {
				re, m, err := t.Renumber(scionlab.FirstASN)
				if err != nil {
					return err
				}
				for _, a := range t.ASes {
					fmt.Printf("%s → %s\n", a.IA, m[a.IA])
				}
				t = re
			}
			fmt.Print(scionlab.FormatLayout(t))
			return nil
		},
	}
	topo.Flags().BoolVar(&topoRenumber, "renumber", false, "give the ASes BGP-style numbers from 64512 on (SM-IP addresses for their hosts)")
	cmd.AddCommand(up, status, check, restart, link, down, topo)
	return cmd
}

// scionDir is the SCION network's directory: --dir if given, else the
// prefix's own (scionlab.DirFor).
func scionDir(dir, prefix string) string {
	if dir != "" {
		return dir
	}
	return scionlab.DirFor(prefix)
}
