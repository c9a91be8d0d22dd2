// Package checksum is the Internet checksum (RFC 1071) for the Go side: the
// lab's packet builders and the tests that check what the kernel programs
// wrote, independently of them.
package checksum

import "encoding/binary"

// Sum adds b to s as big-endian 16-bit words; an odd last byte is the
// first byte of a zero-padded word.
func Sum(b []byte, s uint32) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// Fold folds a sum to 16 bits with the end-around carry.
func Fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
