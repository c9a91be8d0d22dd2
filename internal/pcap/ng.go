package pcap

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// NgWriter writes Ethernet frames as pcapng, each with a comment of its own
// (opt_comment of its Enhanced Packet Block, which Wireshark shows as the
// packet's comment and filters with frame.comment), and an interface block
// per device, named. gopacket's writer has no per-packet options.
type NgWriter struct {
	w       *bufio.Writer
	snaplen uint32
	ifaces  map[string]uint32
}

// pcapng block types and option codes (RFC draft-ietf-opsawg-pcapng).
const (
	ngBlockSection   = 0x0a0d0d0a
	ngBlockInterface = 0x00000001
	ngBlockPacket    = 0x00000006
	ngByteOrderMagic = 0x1a2b3c4d
	ngOptEnd         = 0
	ngOptComment     = 1
	ngOptIfName      = 2
	ngOptIfTsresol   = 9
	ngOptShbUserAppl = 4
)

// NewNgWriter writes the section header; snaplen is given to each
// interface.
func NewNgWriter(w io.Writer, snaplen int, app string) (*NgWriter, error) {
	n := &NgWriter{w: bufio.NewWriter(w), snaplen: uint32(snaplen), ifaces: map[string]uint32{}}
	body := make([]byte, 16)
	binary.LittleEndian.PutUint32(body[0:], ngByteOrderMagic)
	binary.LittleEndian.PutUint16(body[4:], 1) // version 1.0
	binary.LittleEndian.PutUint16(body[6:], 0)
	binary.LittleEndian.PutUint64(body[8:], ^uint64(0)) // section length unknown
	body = ngOption(body, ngOptShbUserAppl, []byte(app))
	body = ngOption(body, ngOptEnd, nil)
	return n, n.block(ngBlockSection, body)
}

// ngOption appends one option, padded to 32 bits.
func ngOption(b []byte, code uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func (n *NgWriter) block(typ uint32, body []byte) error {
	total := uint32(12 + len(body))
	var h [8]byte
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint32(h[4:], total)
	n.w.Write(h[:])
	n.w.Write(body)
	_, err := n.w.Write(h[4:8])
	return err
}

// iface is the interface ID of a device, its block written the first time.
func (n *NgWriter) iface(dev string) (uint32, error) {
	if id, ok := n.ifaces[dev]; ok {
		return id, nil
	}
	id := uint32(len(n.ifaces))
	body := make([]byte, 8)
	binary.LittleEndian.PutUint16(body[0:], uint16(layers.LinkTypeEthernet))
	binary.LittleEndian.PutUint32(body[4:], n.snaplen)
	if dev != "" {
		body = ngOption(body, ngOptIfName, []byte(dev))
	}
	body = ngOption(body, ngOptIfTsresol, []byte{9}) // ns
	body = ngOption(body, ngOptEnd, nil)
	if err := n.block(ngBlockInterface, body); err != nil {
		return 0, err
	}
	n.ifaces[dev] = id
	return id, nil
}

// WritePacket writes one frame: data is what was kept of a frame of length
// bytes that came in by dev at ts, comment its comment ("" for none).
func (n *NgWriter) WritePacket(dev string, ts time.Time, data []byte, length int, comment string) error {
	id, err := n.iface(dev)
	if err != nil {
		return err
	}
	ns := uint64(ts.UnixNano())
	body := make([]byte, 20, 20+len(data)+len(comment)+16)
	binary.LittleEndian.PutUint32(body[0:], id)
	binary.LittleEndian.PutUint32(body[4:], uint32(ns>>32))
	binary.LittleEndian.PutUint32(body[8:], uint32(ns))
	binary.LittleEndian.PutUint32(body[12:], uint32(len(data)))
	binary.LittleEndian.PutUint32(body[16:], uint32(length))
	body = append(body, data...)
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	if comment != "" {
		body = ngOption(body, ngOptComment, []byte(comment))
		body = ngOption(body, ngOptEnd, nil)
	}
	return n.block(ngBlockPacket, body)
}

// Flush writes what is buffered.
func (n *NgWriter) Flush() error { return n.w.Flush() }

// Writer writes Ethernet frames as classic pcap, with nanosecond
// timestamps, as a stream (no comments: pcap has none).
type Writer struct {
	w  *pcapgo.Writer
	bw *bufio.Writer
}

// NewWriter writes the file header.
func NewWriter(w io.Writer, snaplen int) (*Writer, error) {
	bw := bufio.NewWriter(w)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("write pcap header: %w", err)
	}
	return &Writer{w: pw, bw: bw}, nil
}

// WritePacket writes one frame (kept bytes of length).
func (p *Writer) WritePacket(ts time.Time, data []byte, length int) error {
	return p.w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: length}, data)
}

// Flush writes what is buffered.
func (p *Writer) Flush() error { return p.bw.Flush() }
