package tra

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

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
	// EventProbe is an SCMP traceroute reply from IA: Data is the SCMP
	// message, the answer to one of the daemon's path probes.
	EventProbe EventKind = 4
)

// Event is one record of tra_held, tra_events or tra_probes.
type Event struct {
	Kind               EventKind
	IA                 addr.IA
	SCMPType, SCMPCode uint8
	SrcHost            netip.Addr
	// PathType is the SCION path type an SCMP message came with (1
	// standard: handed over by a router; 0 empty: from a host of the AS),
	// From who handed it over on the underlay.
	PathType uint8
	From     netip.AddrPort
	// UID is a held packet's socket owner (uidUnknown: none known).
	UID  uint32
	Data []byte
}

// uidUnknown is the uid of a held packet without a socket of the host's
// (TRA_UID_UNKNOWN).
const uidUnknown = 65534

// Where struct tra_event keeps its fields; the test of the layout compares
// them with the generated type.
const (
	evKind       = 0
	evLen        = 4
	evIA         = 8
	evSCMPType   = 16
	evSCMPCode   = 17
	evSrcHostLen = 18
	evPathType   = 19
	evUID        = 20
	evSrcHost    = 24
	evFromAddr   = 40
	evFromPort   = 44
	evData       = 48
)

// decodeEvent reads a ring buffer record by hand (the data plane sends one
// per held packet, so this is on the daemon's busiest path). It refuses
// what a program cannot have written.
func decodeEvent(raw []byte) (Event, error) {
	if len(raw) < int(unsafe.Sizeof(translatorTraEvent{})) {
		return Event{}, fmt.Errorf("event of %d bytes, want %d", len(raw), unsafe.Sizeof(translatorTraEvent{}))
	}
	n := int(binary.NativeEndian.Uint32(raw[evLen:]))
	if n > len(translatorTraEvent{}.Data) {
		return Event{}, fmt.Errorf("event says %d bytes of data, holds %d", n, len(translatorTraEvent{}.Data))
	}
	ev := Event{
		Kind:     EventKind(binary.NativeEndian.Uint32(raw[evKind:])),
		IA:       addr.IA(binary.BigEndian.Uint64(raw[evIA:])),
		SCMPType: raw[evSCMPType], SCMPCode: raw[evSCMPCode],
		PathType: raw[evPathType],
		UID:      binary.NativeEndian.Uint32(raw[evUID:]),
		From:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[evFromAddr:evFromAddr+4])), binary.BigEndian.Uint16(raw[evFromPort:])),
		Data:     append([]byte(nil), raw[evData:evData+n]...),
	}
	switch raw[evSrcHostLen] {
	case 4:
		ev.SrcHost = netip.AddrFrom4([4]byte(raw[evSrcHost : evSrcHost+4]))
	case 16:
		ev.SrcHost = netip.AddrFrom16([16]byte(raw[evSrcHost : evSrcHost+16]))
	}
	return ev, nil
}

// Where struct tra_probe_reply keeps its fields.
const (
	prIA       = 0
	prFromAddr = 8
	prFromPort = 12
	prPathType = 14
	prLen      = 15
	prMsg      = 16
)

// decodeProbeReply reads a record of tra_probes as an EventProbe.
func decodeProbeReply(raw []byte) (Event, error) {
	if len(raw) < int(unsafe.Sizeof(translatorTraProbeReply{})) {
		return Event{}, fmt.Errorf("probe reply of %d bytes, want %d", len(raw), unsafe.Sizeof(translatorTraProbeReply{}))
	}
	n := int(raw[prLen])
	if n > len(translatorTraProbeReply{}.Msg) {
		return Event{}, fmt.Errorf("probe reply says %d bytes, holds %d", n, len(translatorTraProbeReply{}.Msg))
	}
	return Event{
		Kind:     EventProbe,
		IA:       addr.IA(binary.BigEndian.Uint64(raw[prIA:])),
		PathType: raw[prPathType],
		From:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[prFromAddr:prFromAddr+4])), binary.BigEndian.Uint16(raw[prFromPort:])),
		Data:     append([]byte(nil), raw[prMsg:prMsg+n]...),
	}, nil
}
