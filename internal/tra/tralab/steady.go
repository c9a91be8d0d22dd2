package tralab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// steady is the traffic a long run keeps up between two hosts while it
// breaks things around them: sequence-numbered UDP datagrams at a fixed
// rate, echoed back; a TCP stream at a fixed rate; ping6. It notes what
// each of them saw, so that a loss, a stall or a stuck flow shows.
type steady struct {
	start time.Time
	rate  int // UDP datagrams a second

	udp  *net.UDPConn
	echo *net.UDPConn
	mu   sync.Mutex
	sent []time.Time // by sequence number
	got  []time.Time // zero: no echo (yet)

	ln       net.Listener
	tcpBytes atomic.Uint64
	tcpMu    sync.Mutex
	lastRead time.Time
	stall    time.Duration
	tcpErr   error
	// stallFrom is when stalls start to count: the flows' first minutes
	// on a young network are not the soak's.
	stallFrom time.Time

	ping    *exec.Cmd
	pingOut bytes.Buffer

	stop chan struct{}
	wg   sync.WaitGroup
}

// SteadyPorts are where the steady traffic's servers listen.
const (
	steadyUDPPort = 5310
	steadyTCPPort = 5311
)

// startSteady starts the traffic from the client host (cns) to the server
// host (sns, at dst): rate UDP datagrams a second of udpLen bytes, and a TCP
// stream of tcpRate bits a second.
func startSteady(cns, sns string, dst netip.Addr, rate, udpLen int, tcpRate uint64) (*steady, error) {
	s := &steady{start: time.Now(), rate: rate, stop: make(chan struct{})}
	var err error
	if err = netns.Run(sns, func() error {
		var err error
		if s.echo, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, steadyUDPPort))); err != nil {
			return err
		}
		s.ln, err = net.Listen("tcp6", netip.AddrPortFrom(dst, steadyTCPPort).String())
		return err
	}); err != nil {
		s.close()
		return nil, fmt.Errorf("steady traffic's servers on %s in %s: %w", dst, sns, err)
	}
	go echoAll(s.echo)
	if err = netns.Run(cns, func() error {
		var err error
		s.udp, err = net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, steadyUDPPort)))
		return err
	}); err != nil {
		s.close()
		return nil, err
	}
	s.wg.Add(3)
	go s.sendUDP(udpLen)
	go s.readUDP()
	go s.serveTCP()
	var conn net.Conn
	if err = netns.Run(cns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp6", netip.AddrPortFrom(dst, steadyTCPPort).String(), 20*time.Second)
		return err
	}); err != nil {
		s.close()
		return nil, fmt.Errorf("the steady TCP stream: %w", err)
	}
	s.wg.Add(1)
	go s.sendTCP(conn, tcpRate)
	s.ping = exec.Command("ping", "-6", "-n", "-i", "0.2", "-W", "2", dst.String())
	s.ping.Stdout, s.ping.Stderr = &s.pingOut, &s.pingOut
	if err := netns.Run(cns, s.ping.Start); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func echoAll(c *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		c.WriteToUDPAddrPort(buf[:n], from)
	}
}

func (s *steady) sendUDP(size int) {
	defer s.wg.Done()
	tick := time.NewTicker(time.Second / time.Duration(s.rate))
	defer tick.Stop()
	msg := make([]byte, max(size, 8))
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		seq := uint32(len(s.sent))
		s.sent = append(s.sent, time.Now())
		s.got = append(s.got, time.Time{})
		s.mu.Unlock()
		binary.BigEndian.PutUint32(msg, seq)
		s.udp.Write(msg)
	}
}

func (s *steady) readUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := s.udp.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n < 4 {
			continue // an ICMPv6 error on the connected socket, say
		}
		seq := binary.BigEndian.Uint32(buf)
		s.mu.Lock()
		if int(seq) < len(s.got) && s.got[seq].IsZero() {
			s.got[seq] = time.Now()
		}
		s.mu.Unlock()
	}
}

func (s *steady) serveTCP() {
	defer s.wg.Done()
	c, err := s.ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	buf := make([]byte, 1<<16)
	for {
		n, err := c.Read(buf)
		now := time.Now()
		s.tcpMu.Lock()
		if n > 0 {
			if !s.lastRead.IsZero() && !s.stallFrom.IsZero() && s.lastRead.After(s.stallFrom) {
				s.stall = max(s.stall, now.Sub(s.lastRead))
			}
			s.lastRead = now
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			s.tcpErr = err
		}
		s.tcpMu.Unlock()
		s.tcpBytes.Add(uint64(n))
		if err != nil {
			return
		}
	}
}

func (s *steady) sendTCP(c net.Conn, rate uint64) {
	defer s.wg.Done()
	defer c.Close()
	chunk := make([]byte, max(rate/8/100, 1))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(chunk); err != nil {
			s.tcpMu.Lock()
			s.tcpErr = fmt.Errorf("the TCP stream's sender: %w", err)
			s.tcpMu.Unlock()
			return
		}
	}
}

// udpWindow is what became of the datagrams sent in [from, to): sent, and
// lost (never echoed, or echoed more than 3 s later).
func (s *steady) udpWindow(from, to time.Time) (sent, lost int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, at := range s.sent {
		if at.Before(from) || !at.Before(to) {
			continue
		}
		sent++
		if s.got[i].IsZero() || s.got[i].Sub(at) > 3*time.Second {
			lost++
		}
	}
	return sent, lost
}

// rtts are the round trips of the datagrams sent in [from, to) that came
// back.
func (s *steady) rtts(from, to time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for i, at := range s.sent {
		if !at.Before(from) && at.Before(to) && !s.got[i].IsZero() {
			out = append(out, s.got[i].Sub(at))
		}
	}
	return out
}

// flowing says whether an echo and some of the TCP stream have come back.
func (s *steady) flowing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.got {
		if !g.IsZero() {
			return s.tcpBytes.Load() > 0
		}
	}
	return false
}

// udpGap is the longest time without an echo while datagrams went out, from
// from up to until, a moment at least 3 s before now (what is still on its
// way is not a gap): the longest interval between the first datagram sent
// and the echoes, in the order they arrived, up to the last datagram sent. One echo that comes back late
// (a datagram held while its path was looked up) is not a gap when others
// came back meanwhile; taken in the order the datagrams were sent, it was:
// TestSoakBriefly once saw a gap of 5.1 s with 1.1 s of datagrams lost.
func (s *steady) udpGap(from, until time.Time) time.Duration {
	s.mu.Lock()
	var first, lastSent time.Time
	var arrivals []time.Time
	for i, at := range s.sent {
		if at.Before(from) {
			continue
		}
		if !at.Before(until) {
			break
		}
		if first.IsZero() {
			first = at
		}
		lastSent = at
		if !s.got[i].IsZero() {
			arrivals = append(arrivals, s.got[i])
		}
	}
	s.mu.Unlock()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	last := first
	for _, g := range arrivals {
		if !g.After(last) {
			continue
		}
		// Only while datagrams went out: after the last, silence is no gap.
		end := g
		if end.After(lastSent) {
			end = lastSent
		}
		if end.After(last) {
			gap = max(gap, end.Sub(last))
		}
		last = g
	}
	return gap
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// close stops the traffic and says what ping6 counted.
func (s *steady) close() (pingSent, pingGot int) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	if s.ping != nil && s.ping.Process != nil {
		s.ping.Process.Signal(syscall.SIGINT)
		s.ping.Wait()
		if m := pingSummary.FindStringSubmatch(s.pingOut.String()); m != nil {
			pingSent, _ = strconv.Atoi(m[1])
			pingGot, _ = strconv.Atoi(m[2])
		}
	}
	for _, c := range []io.Closer{s.udp, s.echo, s.ln} {
		if c != nil && !isNil(c) {
			c.Close()
		}
	}
	s.wg.Wait()
	return pingSent, pingGot
}

func isNil(c io.Closer) bool {
	switch v := c.(type) {
	case *net.UDPConn:
		return v == nil
	case net.Listener:
		return v == nil
	}
	return false
}

// countFrom starts counting the TCP stream's stalls now.
func (s *steady) countFrom(t time.Time) {
	s.tcpMu.Lock()
	s.stallFrom = t
	s.tcpMu.Unlock()
}

// tcpState is the TCP stream's longest stall so far and its error, if it
// broke.
func (s *steady) tcpState() (time.Duration, error) {
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	stall := s.stall
	if !s.lastRead.IsZero() {
		stall = max(stall, time.Since(s.lastRead))
	}
	return stall, s.tcpErr
}
