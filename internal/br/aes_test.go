package br

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// aesVector is one CMAC of a single complete block.
type aesVector struct {
	key, input, cmac string // key in base64, the others in hex
}

// aesVectors are the published CMACs of one complete block the Go and the
// kernel implementation must both reproduce.
var aesVectors = map[string]aesVector{
	// A SCION forwarding key (the one scapy-scion's tests derive from the
	// master key IAOYbTs/CobLFV3T3jt6lQ==) and a hop field's MAC input.
	"SCION hop field": {"xEg7WN/vMCn+ccb3P7O/5A==", "0000123461000000003f000100020000", "09abf7f041e45badb5c5ec36911e68a8"},
	// RFC 4493 §4, example 2.
	"RFC 4493 example 2": {"K34VFiiu0qar9xWICc9PPA==", "6bc1bee22e409f96e93d7e117393172a", "070a16b46b4d4144f79bdd9dd04a287c"},
}

func (v aesVector) decode(t *testing.T) (key []byte, input, cmac [16]byte) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(v.key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		hex string
		out *[16]byte
	}{{v.input, &input}, {v.cmac, &cmac}} {
		b, err := hex.DecodeString(f.hex)
		if err != nil || len(b) != 16 {
			t.Fatalf("bad vector %q: %v", f.hex, err)
		}
		*f.out = [16]byte(b)
	}
	return key, input, cmac
}

// genericCMAC is RFC 4493's AES-CMAC for any message length, written apart
// from aeskey.go (both subkeys, padding, chaining) as a second opinion.
func genericCMAC(t *testing.T, key, msg []byte) [16]byte {
	t.Helper()
	c, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	dbl := func(in [16]byte) (out [16]byte) {
		carry := byte(0)
		for i := 15; i >= 0; i-- {
			out[i] = in[i]<<1 | carry
			carry = in[i] >> 7
		}
		if carry != 0 {
			out[15] ^= 0x87
		}
		return out
	}
	var l [16]byte
	c.Encrypt(l[:], l[:])
	k1 := dbl(l)
	k2 := dbl(k1)

	n := (len(msg) + 15) / 16
	complete := n > 0 && len(msg)%16 == 0
	if n == 0 {
		n = 1
	}
	var last [16]byte
	rest := msg[16*(n-1):]
	copy(last[:], rest)
	sub := k1
	if !complete {
		last[len(rest)] = 0x80
		sub = k2
	}
	var x [16]byte
	for i := 0; i < n; i++ {
		blk := last
		if i < n-1 {
			blk = [16]byte(msg[16*i:])
		} else {
			for j := range blk {
				blk[j] ^= sub[j]
			}
		}
		for j := range x {
			x[j] ^= blk[j]
		}
		c.Encrypt(x[:], x[:])
	}
	return x
}

// refEncrypt is a byte-by-byte AES-128 encryption (FIPS-197 §5.1) with round
// keys in the layout aes.h reads: a model of the kernel side for Go tests.
func refEncrypt(rk RoundKeys, in [16]byte) [16]byte {
	st := in
	addRoundKey := func(r int) {
		for c := range 4 {
			w := rk[4*r+c]
			st[4*c] ^= byte(w >> 24)
			st[4*c+1] ^= byte(w >> 16)
			st[4*c+2] ^= byte(w >> 8)
			st[4*c+3] ^= byte(w)
		}
	}
	addRoundKey(0)
	for r := 1; r <= 10; r++ {
		var t [16]byte
		for c := range 4 { // SubBytes and ShiftRows: row i moves left by i
			for i := range 4 {
				t[4*c+i] = sbox[st[4*((c+i)%4)+i]]
			}
		}
		if r < 10 { // MixColumns
			for c := range 4 {
				a0, a1, a2, a3 := t[4*c], t[4*c+1], t[4*c+2], t[4*c+3]
				all := a0 ^ a1 ^ a2 ^ a3
				t[4*c] ^= all ^ xtime(a0^a1)
				t[4*c+1] ^= all ^ xtime(a1^a2)
				t[4*c+2] ^= all ^ xtime(a2^a3)
				t[4*c+3] ^= all ^ xtime(a3^a0)
			}
		}
		st = t
		addRoundKey(r)
	}
	return st
}

func aesRandomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAESGoVectors(t *testing.T) {
	for name, v := range aesVectors {
		t.Run(name, func(t *testing.T) {
			key, input, want := v.decode(t)
			if got := HopMAC(key, input); got != [6]byte(want[:6]) {
				t.Errorf("HopMAC = %x, want %x", got, want[:6])
			}
			if got := genericCMAC(t, key, input[:]); got != want {
				t.Errorf("generic CMAC = %x, want %x", got, want)
			}
			rk, err := CMACRoundKeys(key)
			if err != nil {
				t.Fatal(err)
			}
			if got := refEncrypt(rk, input); got != want {
				t.Errorf("AES with CMACRoundKeys = %x, want %x", got, want)
			}
		})
	}
}

// TestAESGenericCMAC checks the second opinion itself on RFC 4493 §4's
// examples, which cover the empty, partial and multi-block cases it has
// beyond the one-block case.
func TestAESGenericCMAC(t *testing.T) {
	key, _ := hex.DecodeString("2b7e151628aed2a6abf7158809cf4f3c")
	msg, _ := hex.DecodeString("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51" +
		"30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710")
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "bb1d6929e95937287fa37d129b756746"},
		{16, "070a16b46b4d4144f79bdd9dd04a287c"},
		{40, "dfa66747de9ae63030ca32611497c827"},
		{64, "51f0bebf7e3b9d92fc49741779363cfe"},
	} {
		if got := genericCMAC(t, key, msg[:c.n]); hex.EncodeToString(got[:]) != c.want {
			t.Errorf("%d bytes: CMAC %x, want %s", c.n, got, c.want)
		}
	}
}

// TestAESExpandKey checks the key schedule against FIPS-197 appendix A.1.
func TestAESExpandKey(t *testing.T) {
	key, _ := hex.DecodeString("2b7e151628aed2a6abf7158809cf4f3c")
	rk := expandKey(key)
	for i, want := range map[int]uint32{
		0: 0x2b7e1516, 3: 0x09cf4f3c, 4: 0xa0fafe17, 9: 0x7a96b943,
		20: 0xd4d1c6f8, 36: 0xac7766f3, 40: 0xd014f9a8, 43: 0xb6630ca6,
	} {
		if rk[i] != want {
			t.Errorf("w[%d] = %08x, want %08x", i, rk[i], want)
		}
	}
}

func TestAESGoRandom(t *testing.T) {
	for range 1000 {
		key := aesRandomBytes(t, 16)
		input := [16]byte(aesRandomBytes(t, 16))
		want := genericCMAC(t, key, input[:])
		if got := cmacOneBlock(key, input); got != want {
			t.Fatalf("key %x input %x: CMAC %x, want %x", key, input, got, want)
		}
		rk, err := CMACRoundKeys(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := refEncrypt(rk, input); got != want {
			t.Fatalf("key %x input %x: AES with CMACRoundKeys %x, want %x", key, input, got, want)
		}
	}
}

// TestAESBadKey checks that only AES-128 keys are taken, also the AES-192
// and AES-256 sizes crypto/aes would accept.
func TestAESBadKey(t *testing.T) {
	for _, n := range []int{0, 15, 17, 24, 32} {
		if _, err := CMACRoundKeys(make([]byte, n)); !errors.Is(err, ErrKeySize) {
			t.Errorf("CMACRoundKeys, %d-byte key: error %v, want ErrKeySize", n, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HopMAC, %d-byte key: no panic", n)
				}
			}()
			HopMAC(make([]byte, n), [16]byte{})
		}()
	}
}

// loadAESTest loads the test harness around aes.h, failing (not skipping)
// when the process cannot load BPF programs.
func loadAESTest(t testing.TB) *aestestObjects {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	var objs aestestObjects
	if err := loadAestestObjects(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load aes_test: %+v", ve)
		}
		t.Fatalf("load aes_test: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// aesFrame is the 64-byte frame the harness encrypts: the block, then a
// tail the program must leave alone.
func aesFrame(block [16]byte) []byte {
	frame := make([]byte, 64)
	copy(frame, block[:])
	for i := 16; i < len(frame); i++ {
		frame[i] = byte(i)
	}
	return frame
}

func setAESKey(t testing.TB, objs *aestestObjects, rk RoundKeys) {
	t.Helper()
	if err := objs.AesTestKey.Put(uint32(0), aestestBrKey{Valid: 1, Rk: rk}); err != nil {
		t.Fatalf("put key: %v", err)
	}
}

// kernelCMAC runs the harness once on block with round keys rk.
func kernelCMAC(t *testing.T, objs *aestestObjects, rk RoundKeys, block [16]byte) [16]byte {
	t.Helper()
	setAESKey(t, objs, rk)
	in := aesFrame(block)
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := objs.AesTest.Run(&opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	if ret != 3 /* XDP_TX */ {
		t.Fatalf("action %d, want XDP_TX", ret)
	}
	out := opts.DataOut
	if len(out) != len(in) || !bytes.Equal(out[16:], in[16:]) {
		t.Fatalf("frame beyond the block changed: %x, want %x", out[16:], in[16:])
	}
	return [16]byte(out)
}

func TestAESKernel(t *testing.T) {
	objs := loadAESTest(t)
	for name, v := range aesVectors {
		t.Run(name, func(t *testing.T) {
			key, input, want := v.decode(t)
			rk, err := CMACRoundKeys(key)
			if err != nil {
				t.Fatal(err)
			}
			if got := kernelCMAC(t, objs, rk, input); got != want {
				t.Errorf("kernel CMAC %x, want %x", got, want)
			}
		})
	}
	t.Run("random", func(t *testing.T) {
		for range 1000 {
			key := aesRandomBytes(t, 16)
			input := [16]byte(aesRandomBytes(t, 16))
			rk, err := CMACRoundKeys(key)
			if err != nil {
				t.Fatal(err)
			}
			want := cmacOneBlock(key, input)
			if got := kernelCMAC(t, objs, rk, input); got != want {
				t.Fatalf("key %x input %x: kernel CMAC %x, want %x", key, input, got, want)
			}
			if [6]byte(want[:6]) != HopMAC(key, input) {
				t.Fatalf("HopMAC is not the CMAC's first 6 bytes")
			}
		}
	})
}

// TestAESKernelSpeed reports what one block costs in the kernel: the
// harness's time per test run, minus that of a program that only returns
// XDP_TX (the test-run loop's own overhead). The figures are logged, never
// asserted: the machine is shared and noisy, so it reports the best of a
// few runs.
func TestAESKernelSpeed(t *testing.T) {
	const repeat, rounds = 1_000_000, 5
	objs := loadAESTest(t)
	key, input, _ := aesVectors["SCION hop field"].decode(t)
	rk, err := CMACRoundKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	setAESKey(t, objs, rk)

	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 3 /* XDP_TX */), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load empty program: %v", err)
	}
	defer empty.Close()

	best := func(prog *ebpf.Program) time.Duration {
		fastest := time.Duration(1 << 62)
		for range rounds {
			_, d, err := prog.Benchmark(aesFrame(input), repeat, nil)
			if err != nil {
				t.Fatal(err)
			}
			fastest = min(fastest, d)
		}
		return fastest
	}
	withAES, bare := best(objs.AesTest), best(empty)
	t.Logf("per run, best of %d × %d: aes_test %v, empty program %v, AES block ≈ %v",
		rounds, repeat, withAES, bare, withAES-bare)

	if info, err := objs.AesTest.Info(); err == nil {
		verified, _ := info.VerifiedInstructions()
		xlated, _ := info.TranslatedSize()
		jited, _ := info.JitedSize()
		t.Logf("aes_test: %d instructions verified, %d bytes translated, %d bytes JITed", verified, xlated, jited)
	}
}
