// Package capture reads the frames a device sends and receives (an
// AF_PACKET socket in the device's namespace), with what the kernel knows
// of each that the bytes do not say: its direction, and whether its
// checksum is still owed (TP_STATUS_CSUMNOTREADY: CHECKSUM_PARTIAL).
package capture

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Frame is one captured frame.
type Frame struct {
	Data []byte
	// Outgoing says the device sent it (else it received it).
	Outgoing bool
	// Pending says its L4 checksum is still to be completed: the field
	// holds only the pseudo-header's sum.
	Pending bool
}

// Tap captures every frame of one device until Close.
type Tap struct {
	fd     int
	mu     sync.Mutex
	frames []Frame
	stop   chan struct{}
	done   chan struct{}
}

// Open starts capturing on the device.
func Open(i xdp.Iface) (*Tap, error) {
	a, err := xdp.Lookup(i)
	if err != nil {
		return nil, err
	}
	t := &Tap{fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	all := htons(unix.ETH_P_ALL)
	err = netns.Run(i.Netns, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(all))
		if err != nil {
			return err
		}
		t.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		// Wake up now and then to notice Close.
		tv := unix.Timeval{Usec: 100000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all, Ifindex: a.Index})
	})
	if err != nil {
		if t.fd >= 0 {
			unix.Close(t.fd)
		}
		return nil, fmt.Errorf("capture on %s: %w", i, err)
	}
	go t.read()
	return t, nil
}

func (t *Tap) read() {
	defer close(t.done)
	buf, oob := make([]byte, 65536), make([]byte, 256)
	for {
		select {
		case <-t.stop:
			return
		default:
		}
		n, oobn, _, from, err := unix.Recvmsg(t.fd, buf, oob, 0)
		if err != nil {
			continue
		}
		f := Frame{Data: append([]byte(nil), buf[:n]...)}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok {
			f.Outgoing = ll.Pkttype == unix.PACKET_OUTGOING
		}
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				// struct tpacket_auxdata starts with tp_status.
				if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
					f.Pending = binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_CSUMNOTREADY != 0
				}
			}
		}
		t.mu.Lock()
		t.frames = append(t.frames, f)
		t.mu.Unlock()
	}
}

// Frames are the frames captured so far.
func (t *Tap) Frames() []Frame {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Frame(nil), t.frames...)
}

// Close stops capturing.
func (t *Tap) Close() error {
	close(t.stop)
	<-t.done
	return unix.Close(t.fd)
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
