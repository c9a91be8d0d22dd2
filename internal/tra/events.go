package tra

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/scionproto/scion/pkg/addr"
)

// EventKind is what a program sent the daemon (enum tra_event_kind).
type EventKind uint32

const (
	// EventNoPath is a held packet (IPv6, whole): translate it once a path
	// to IA is installed.
	EventNoPath EventKind = 1
	// EventSCMP is an SCMP error from IA about a path (interface down,
	// expired): Data is the SCMP message.
	EventSCMP EventKind = 2
)

// Event is one record of tra_events.
type Event struct {
	Kind               EventKind
	IA                 addr.IA
	SCMPType, SCMPCode uint8
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
	return Event{
		Kind: EventKind(e.Kind), IA: addr.IA(binary.BigEndian.Uint64(b[:])),
		SCMPType: e.ScmpType, SCMPCode: e.ScmpCode, Data: append([]byte(nil), e.Data[:e.Len]...),
	}, nil
}
