package tra

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/scionproto/scion/pkg/addr"
)

// EventKind is what a program sent the daemon (enum tra_event_kind).
type EventKind uint32

const (
	// EventNoPath is a held packet (IPv6, whole): translate it once a path
	// to IA is installed.
	EventNoPath EventKind = 1
	// EventSCMP is an SCMP error for the host from IA (the sender's host
	// address SrcHost): Data is the SCMP message.
	EventSCMP EventKind = 2
	// EventICMP is an ICMPv6 error the host sent to IA: Data is the IPv6
	// packet.
	EventICMP EventKind = 3
)

// Event is one record of tra_events.
type Event struct {
	Kind               EventKind
	IA                 addr.IA
	SCMPType, SCMPCode uint8
	SrcHost            netip.Addr
	Data               []byte
}

// decodeEvent reads a ring buffer record.
func decodeEvent(raw []byte) (Event, error) {
	var e translatorTraEvent
	if len(raw) < binary.Size(e) {
		return Event{}, fmt.Errorf("event of %d bytes, want %d", len(raw), binary.Size(e))
	}
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &e); err != nil {
		return Event{}, err
	}
	if int(e.Len) > len(e.Data) {
		return Event{}, fmt.Errorf("event says %d bytes of data, holds %d", e.Len, len(e.Data))
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], e.Ia)
	ev := Event{
		Kind: EventKind(e.Kind), IA: addr.IA(binary.BigEndian.Uint64(b[:])),
		SCMPType: e.ScmpType, SCMPCode: e.ScmpCode, Data: append([]byte(nil), e.Data[:e.Len]...),
	}
	switch e.SrcHostLen {
	case 4:
		ev.SrcHost = netip.AddrFrom4([4]byte(e.SrcHost[:4]))
	case 16:
		ev.SrcHost = netip.AddrFrom16(e.SrcHost)
	}
	return ev, nil
}
