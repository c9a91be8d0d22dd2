package tra

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/snet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What the daemon reaches outside itself: the host (packets into the pair
// either way), SCION (its own packets to a router or a host of the AS) and
// scionproto's daemon. Each is an interface, so that the daemon's logic is
// tested without a kernel.

// hostPort hands packets to the translator's pair.
type hostPort interface {
	// send sends an IPv6 packet as if the host sent it again (into tra_out).
	send(ipv6 []byte) error
	// toHost hands an IPv6 packet to the host's stack.
	toHost(ipv6 []byte) error
}

// scionPort sends what the daemon makes itself into SCION: SCMP errors and
// path probes, as UDP to the first hop.
type scionPort interface {
	writeTo(b []byte, to netip.AddrPort) error
}

// PathSource gives paths to a destination AS; scionproto's daemon is one.
type PathSource interface {
	Paths(ctx context.Context, dst, src addr.IA, f daemon.PathReqFlags) ([]snet.Path, error)
}

// errDaemonUnreachable says a lookup found scionproto's daemon unreachable.
var errDaemonUnreachable = errors.New("scionproto's daemon is not reachable")

// lazySource connects to scionproto's daemon when a lookup needs it, with
// a deadline, and again after a failure: a daemon that is down at start or
// restarts later costs lookups, never the translator's own loop.
type lazySource struct {
	addr    string
	timeout time.Duration

	mu   sync.Mutex
	conn daemon.Connector
}

func (s *lazySource) Paths(ctx context.Context, dst, src addr.IA, f daemon.PathReqFlags) ([]snet.Path, error) {
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	paths, err := c.Paths(ctx, dst, src, f)
	if status.Code(err) == codes.Unavailable {
		// The connection is made lazily: a daemon down (or gone since)
		// shows here.
		return nil, fmt.Errorf("%w at %s: %w", errDaemonUnreachable, s.addr, err)
	}
	return paths, err
}

func (s *lazySource) connect(ctx context.Context) (daemon.Connector, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, err := daemon.NewService(s.addr).Connect(cctx)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", errDaemonUnreachable, s.addr, err)
	}
	s.conn = c
	return c, nil
}

func (s *lazySource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// udpPort is the daemon's UDP socket on the host's underlay address.
type udpPort struct{ c *net.UDPConn }

func (u udpPort) writeTo(b []byte, to netip.AddrPort) error {
	_, err := u.c.WriteToUDPAddrPort(b, to)
	return err
}

// injector sends packets into the pair from either end, by a packet
// socket; it looks the pair up again when it was made anew.
type injector struct {
	pair     string
	fd       int
	ifindex  int // the host's end: what is sent there goes into tra_out
	trans    int // the translator's end: what is sent there reaches the host
	src, dst net.HardwareAddr
}

func newInjector(pair string) (*injector, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	// Straight to the device, past its TC egress: a packet sent into the
	// pair is translated at the far end by tra_out, not again at the host's
	// end by tra_out_egress, and is counted crossing it.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("packet socket: PACKET_QDISC_BYPASS: %w", err)
	}
	i := &injector{pair: pair, fd: fd}
	if err := i.lookup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return i, nil
}

// lookup finds the pair's ends, a netlink request each (by name: not the
// dump of every link net.InterfaceByName makes).
func (i *injector) lookup() error {
	host, err := netlink.LinkByName(i.pair + "0")
	if err != nil {
		return fmt.Errorf("the translator's device %s0: %w (is it attached in this namespace?)", i.pair, err)
	}
	trans, err := netlink.LinkByName(i.pair + "1")
	if err != nil {
		return fmt.Errorf("the translator's device %s1: %w", i.pair, err)
	}
	i.ifindex, i.trans, i.src, i.dst = host.Attrs().Index, trans.Attrs().Index, host.Attrs().HardwareAddr, trans.Attrs().HardwareAddr
	return nil
}

func (i *injector) send(ipv6 []byte) error { return i.sendOn(i.ifindex, i.src, i.dst, ipv6) }

func (i *injector) toHost(pkt []byte) error { return i.sendOn(i.trans, i.dst, i.src, pkt) }

func (i *injector) sendOn(ifindex int, src, dst net.HardwareAddr, ipv6 []byte) error {
	if len(src) != 6 || len(dst) != 6 {
		return errors.New("the pair has no Ethernet addresses")
	}
	f := make([]byte, 14+len(ipv6))
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IPV6)
	copy(f[14:], ipv6)
	return unix.Sendto(i.fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(unix.ETH_P_IPV6), Halen: 6, Addr: [8]byte{dst[0], dst[1], dst[2], dst[3], dst[4], dst[5]}})
}

func (i *injector) Close() error { return unix.Close(i.fd) }
