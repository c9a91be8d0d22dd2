package br

import (
	"encoding/binary"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

// udpSpan is where a frame's UDP datagram lies and the sum of its
// pseudo-header, computed here independently of the router.
func udpSpan(f []byte) (off, end int, pseudo uint32, ok bool) {
	if len(f) < 14 {
		return
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xf) * 4
		off = 14 + ihl
		if len(f) < off+8 {
			return
		}
		pseudo = checksum.Sum(f[26:34], 0)
	case 0x86dd:
		off = 14 + 40
		if len(f) < off+8 {
			return
		}
		pseudo = checksum.Sum(f[22:54], 0)
	default:
		return
	}
	n := int(binary.BigEndian.Uint16(f[off+4:]))
	end = off + n
	if n < 8 || end > len(f) {
		return
	}
	return off, end, pseudo + 17 + uint32(n), true
}

// udpChecksumOK says whether a frame's UDP checksum is complete and right
// (IPv4's "no checksum" counts as right).
func udpChecksumOK(f []byte) bool {
	off, end, pseudo, ok := udpSpan(f)
	if !ok {
		return false
	}
	if binary.BigEndian.Uint16(f[off+6:]) == 0 && binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		return true
	}
	return checksum.Fold(checksum.Sum(f[off:end], pseudo)) == 0xffff
}

// setUDPChecksum writes a complete checksum into a frame, as a sender
// without checksum offload would.
func setUDPChecksum(f []byte) {
	off, end, pseudo, ok := udpSpan(f)
	if !ok {
		return
	}
	f[off+6], f[off+7] = 0, 0
	c := ^checksum.Fold(checksum.Sum(f[off:end], pseudo))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[off+6:], c)
}

// setPendingChecksum writes what a socket on a device with checksum
// offload leaves in the field (CHECKSUM_PARTIAL): the pseudo-header's sum.
func setPendingChecksum(f []byte) {
	off, _, pseudo, ok := udpSpan(f)
	if !ok {
		return
	}
	binary.BigEndian.PutUint16(f[off+6:], checksum.Fold(pseudo))
}
