package br

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// tagKptr gives the pointer member of a map's value struct the "kptr" type
// tag (PTR -> TYPE_TAG "kptr" -> STRUCT), which tells the kernel that the map
// holds a referenced kernel object there. aes_kfunc.h declares the member
// __kptr, but clang before 15 drops type tags from struct members (it keeps
// them on variables and parameters), and without the tag the verifier
// refuses the kfunc call on what it loads from there; the tag is put back
// here, and a member already tagged is left as it is.
func tagKptr(ms *ebpf.MapSpec, member string) error {
	s, ok := ms.Value.(*btf.Struct)
	if !ok {
		return fmt.Errorf("map %s: value is %T, not a struct", ms.Name, ms.Value)
	}
	s = btf.Copy(s).(*btf.Struct)
	for i, m := range s.Members {
		if m.Name != member {
			continue
		}
		p, ok := m.Type.(*btf.Pointer)
		if !ok {
			return fmt.Errorf("map %s: member %s is %T, not a pointer", ms.Name, member, m.Type)
		}
		if tt, ok := p.Target.(*btf.TypeTag); ok && tt.Value == "kptr" {
			return nil
		}
		s.Members[i].Type = &btf.Pointer{Target: &btf.TypeTag{Type: p.Target, Value: "kptr"}}
		ms.Value = s
		return nil
	}
	return fmt.Errorf("map %s: value has no member %s", ms.Name, member)
}

// loadAESKfuncTest loads the kfunc harness, skipping only where the kernel
// has no bpf_crypto kfuncs (before Linux 6.10).
func loadAESKfuncTest(t testing.TB) *aeskfunctestObjects {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	spec, err := loadAeskfunctest()
	if err != nil {
		t.Fatal(err)
	}
	if err := tagKptr(spec.Maps["aes_kfunc_test_key"], "ctx"); err != nil {
		t.Fatal(err)
	}
	var objs aeskfunctestObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("kernel without the bpf_crypto kfuncs (Linux 6.10+): %v", err)
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load aes_kfunc_test: %+v", ve)
		}
		t.Fatalf("load aes_kfunc_test: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

func setAESKfuncKey(t testing.TB, objs *aeskfunctestObjects, key []byte) {
	t.Helper()
	runAESKfuncSetup(t, objs.AesKfuncTestSetup, key)
}

// runAESKfuncSetup runs one of the harness's syscall programs that install a
// key.
func runAESKfuncSetup(t testing.TB, setup *ebpf.Program, key []byte) {
	t.Helper()
	c, err := newCipher128(key)
	if err != nil {
		t.Fatal(err)
	}
	k1 := cmacSubkey(c)
	var a aeskfunctestAesKfuncSetup
	copy(a.Key[:], key)
	for i := range a.K1 {
		a.K1[i] = binary.BigEndian.Uint32(k1[4*i:])
	}
	ret, err := setup.Run(&ebpf.RunOptions{Context: a})
	if err != nil {
		t.Fatalf("run %v: %v", setup, err)
	}
	if ret != 0 {
		t.Fatalf("%v: error %d", setup, int32(ret))
	}
}

func kfuncCMAC(t *testing.T, objs *aeskfunctestObjects, block [16]byte) [16]byte {
	t.Helper()
	in := aesFrame(block)
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := objs.AesKfuncTest.Run(&opts)
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

func TestAESKfunc(t *testing.T) {
	objs := loadAESKfuncTest(t)
	t.Run("empty slot", func(t *testing.T) {
		ret, err := objs.AesKfuncTest.Run(&ebpf.RunOptions{Data: aesFrame([16]byte{})})
		if err != nil {
			t.Fatalf("test run: %v", err)
		}
		if ret != 1 /* XDP_DROP */ {
			t.Errorf("no context installed: action %d, want XDP_DROP", ret)
		}
	})
	for name, v := range aesVectors {
		t.Run(name, func(t *testing.T) {
			key, input, want := v.decode(t)
			setAESKfuncKey(t, objs, key)
			if got := kfuncCMAC(t, objs, input); got != want {
				t.Errorf("kfunc CMAC %x, want %x", got, want)
			}
		})
	}
	// Each key replaces the last one's context (the old one released).
	t.Run("random, against the T-tables", func(t *testing.T) {
		tt := loadAESTest(t)
		for range 200 {
			key := aesRandomBytes(t, 16)
			input := [16]byte(aesRandomBytes(t, 16))
			rk, err := CMACRoundKeys(key)
			if err != nil {
				t.Fatal(err)
			}
			setAESKfuncKey(t, objs, key)
			got, want := kfuncCMAC(t, objs, input), cmacOneBlock(key, input)
			if got != want {
				t.Fatalf("key %x input %x: kfunc CMAC %x, want %x", key, input, got, want)
			}
			if tab := kernelCMAC(t, tt, rk, input); tab != got {
				t.Fatalf("key %x input %x: kfunc CMAC %x, T-tables %x", key, input, got, tab)
			}
		}
	})
}

// TestAESKfuncSpeed compares one block through the kfuncs ("ecb(aes)", and
// the kernel's T-table AES "ecb(aes-generic)" behind the same call) with the
// T-tables in BPF (TestAESKernelSpeed's harness), rounds alternated so that
// the machine's drift reaches all alike; each minus a program that only
// returns XDP_TX. Logged, never asserted.
func TestAESKfuncSpeed(t *testing.T) {
	const repeat, rounds = 1_000_000, 8
	kf, generic := loadAESKfuncTest(t), loadAESKfuncTest(t)
	tt := loadAESTest(t)
	key, input, _ := aesVectors["SCION hop field"].decode(t)
	rk, err := CMACRoundKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	setAESKey(t, tt, rk)
	setAESKfuncKey(t, kf, key)
	runAESKfuncSetup(t, generic.AesKfuncTestSetupGeneric, key)
	for name, objs := range map[string]*aeskfunctestObjects{"ecb(aes)": kf, "ecb(aes-generic)": generic} {
		if got, want := kfuncCMAC(t, objs, input), cmacOneBlock(key, input); got != want {
			t.Fatalf("%s: CMAC %x, want %x", name, got, want)
		}
	}

	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 3 /* XDP_TX */), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load empty program: %v", err)
	}
	defer empty.Close()

	progs := []struct {
		name string
		prog *ebpf.Program
		best time.Duration
	}{{"T-tables", tt.AesTest, 1 << 62}, {"kfunc ecb(aes)", kf.AesKfuncTest, 1 << 62}, {"kfunc ecb(aes-generic)", generic.AesKfuncTest, 1 << 62}, {"empty", empty, 1 << 62}}
	for r := range rounds {
		for i := range progs {
			p := &progs[(i+r)%len(progs)]
			_, d, err := p.prog.Benchmark(aesFrame(input), repeat, nil)
			if err != nil {
				t.Fatal(err)
			}
			p.best = min(p.best, d)
		}
	}
	bare := progs[len(progs)-1].best
	t.Logf("per block, best of %d × %d, rounds alternated, minus the empty program (%v):", rounds, repeat, bare)
	for _, p := range progs[:len(progs)-1] {
		t.Logf("  %-23s %v", p.name, p.best-bare)
	}
}
