package br

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrKeySize is returned for a hop-field key that is not an AES-128 key.
var ErrKeySize = errors.New("hop-field key must be 16 bytes")

// RoundKeys is an AES-128 key schedule in the layout bpf/include/aes.h reads
// (struct br_key's rk): the FIPS-197 words w[0..43] as numbers, w[i] =
// key[4i]<<24 | key[4i+1]<<16 | key[4i+2]<<8 | key[4i+3] for i < 4, each
// stored in host byte order. Round key r is rk[4r..4r+3].
type RoundKeys [44]uint32

// CMACRoundKeys returns the round keys the kernel uses to compute hop-field
// MACs with key: the AES-128 schedule of key with the CMAC subkey K1 XORed
// into round key 0. The MAC input is always one complete block M, for which
// CMAC(K, M) = AES_K(M ⊕ K1) (RFC 4493 §2.4), and M ⊕ K1 ⊕ rk0 is the first
// AddRoundKey: plain AES with these round keys is the CMAC.
func CMACRoundKeys(key []byte) (RoundKeys, error) {
	c, err := newCipher128(key)
	if err != nil {
		return RoundKeys{}, err
	}
	rk := expandKey(key)
	k1 := cmacSubkey(c)
	for i := range 4 {
		rk[i] ^= binary.BigEndian.Uint32(k1[4*i:])
	}
	return rk, nil
}

// HopMAC is the reference the kernel's MAC is tested against: the SCION
// hop-field MAC, AES-CMAC of the 16-byte MAC input truncated to 6 bytes,
// computed with crypto/aes. It panics if key is not 16 bytes long.
func HopMAC(key []byte, input [16]byte) [6]byte {
	full := cmacOneBlock(key, input)
	return [6]byte(full[:6])
}

// cmacOneBlock is AES-CMAC of exactly one complete block: AES_K(M ⊕ K1).
// It panics if key is not 16 bytes long.
func cmacOneBlock(key []byte, m [16]byte) [16]byte {
	c, err := newCipher128(key)
	if err != nil {
		panic(err)
	}
	k1 := cmacSubkey(c)
	for i := range m {
		m[i] ^= k1[i]
	}
	var out [16]byte
	c.Encrypt(out[:], m[:])
	return out
}

// newCipher128 is aes.NewCipher restricted to AES-128, the only cipher of
// SCION's hop-field MAC (aes.NewCipher would take 24 and 32 bytes too).
func newCipher128(key []byte) (cipher.Block, error) {
	if len(key) != 16 {
		return nil, fmt.Errorf("%w, got %d", ErrKeySize, len(key))
	}
	return aes.NewCipher(key)
}

// cmacSubkey derives K1 (RFC 4493 §2.3): L = AES_K(0^128), K1 = L << 1,
// with the last byte XORed with 0x87 if the most significant bit of L was set.
func cmacSubkey(c cipher.Block) [16]byte {
	var l, k1 [16]byte
	c.Encrypt(l[:], l[:])
	for i := range 15 {
		k1[i] = l[i]<<1 | l[i+1]>>7
	}
	k1[15] = l[15] << 1
	if l[0]&0x80 != 0 {
		k1[15] ^= 0x87
	}
	return k1
}

// expandKey is the AES-128 key expansion of FIPS-197 §5.2; key must be 16
// bytes long.
func expandKey(key []byte) RoundKeys {
	var rk RoundKeys
	for i := range 4 {
		rk[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := 4; i < len(rk); i++ {
		t := rk[i-1]
		if i%4 == 0 {
			t = subWord(t<<8|t>>24) ^ rcon<<24
			rcon = uint32(xtime(byte(rcon)))
		}
		rk[i] = rk[i-4] ^ t
	}
	return rk
}

// subWord applies the S-box to each byte of w.
func subWord(w uint32) uint32 {
	return uint32(sbox[w>>24])<<24 | uint32(sbox[w>>16&0xff])<<16 |
		uint32(sbox[w>>8&0xff])<<8 | uint32(sbox[w&0xff])
}

// xtime multiplies b by x (that is, 2) in GF(2^8) modulo x^8+x^4+x^3+x+1.
func xtime(b byte) byte {
	return b<<1 ^ (b>>7)*0x1b
}

// sbox is the AES S-box, computed rather than pasted: S[x] is the affine
// transform of FIPS-197 §5.1.1 applied to x's multiplicative inverse.
var sbox = func() (s [256]byte) {
	rotl := func(b byte, n uint) byte { return b<<n | b>>(8-n) }
	// p walks the multiplicative group through the powers of 3, q through
	// those of 3⁻¹ (= 0xf6), so q = p⁻¹ throughout.
	p, q := byte(1), byte(1)
	for {
		p ^= xtime(p) // p *= 3
		q ^= q << 1   // q *= 0xf6 …
		q ^= q << 2
		q ^= q << 4
		if q&0x80 != 0 { // … reduced
			q ^= 0x09
		}
		s[p] = q ^ rotl(q, 1) ^ rotl(q, 2) ^ rotl(q, 3) ^ rotl(q, 4) ^ 0x63
		if p == 1 {
			break
		}
	}
	s[0] = 0x63 // 0 has no inverse; the affine transform of 0
	return s
}()
