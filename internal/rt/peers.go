package rt

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// The peers the harness runs beside fastpath-rt's engines. rbpf comes from
// crates.io through the harness's Cargo.lock. ubpf comes from crates.io's
// ubpf-sys, whose archive carries ubpf's C sources; the harness loads it as
// a shared library, so an operator can give a newer ubpf build instead.
const (
	ubpfCrate   = "ubpf-sys"
	ubpfVersion = "0.1.1"
	// The archive's SHA-256, as crates.io's index lists it.
	ubpfSHA256 = "ad3da05af153f65c350edaafe9be7ea50a781f991de516b8bf8ac38ae7d03a2b"
)

// PeersDir is where the harness and the peers are built, once per machine:
// FASTPATH_PEERS_DIR if set, else peers in the user's cache directory
// under fastpath.
func PeersDir() string {
	if d := os.Getenv("FASTPATH_PEERS_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fastpath", "peers")
}

var peersMu sync.Mutex

// Harness builds fastpath-rt-peers from the source tree at src (the
// runtime/peers crate) into dir, or finds it built, and returns its path.
// Cargo rebuilds only what changed.
func Harness(src, dir string) (string, error) {
	peersMu.Lock()
	defer peersMu.Unlock()
	manifest := filepath.Join(src, "runtime", "peers", "Cargo.toml")
	if _, err := os.Stat(manifest); err != nil {
		return "", fmt.Errorf("the peer harness's source (%s) is missing: run fastpath rt bench --peers from fastpath's source tree", manifest)
	}
	target := filepath.Join(dir, "target")
	cmd := exec.Command("cargo", "build", "--release", "--locked", "--manifest-path", manifest)
	cmd.Env = append(os.Environ(), "CARGO_TARGET_DIR="+target)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the peer harness (cargo, %s): %v\n%s", manifest, err, tail(stderr.String(), 2000))
	}
	return filepath.Join(target, "release", "fastpath-rt-peers"), nil
}

// UbpfLib builds ubpf from crates.io's ubpf-sys archive into dir, or finds
// it built, and returns the shared library's path.
func UbpfLib(dir string) (string, error) {
	peersMu.Lock()
	defer peersMu.Unlock()
	out := filepath.Join(dir, ubpfCrate+"-"+ubpfVersion)
	lib := filepath.Join(out, "libubpf.so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	url := fmt.Sprintf("https://static.crates.io/crates/%s/%s-%s.crate", ubpfCrate, ubpfCrate, ubpfVersion)
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		return "", fmt.Errorf("fetching ubpf (%s): %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetching ubpf (%s): %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("fetching ubpf (%s): %w", url, err)
	}
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != ubpfSHA256 {
		return "", fmt.Errorf("%s: SHA-256 %x, crates.io lists %s: not using it", url, sum, ubpfSHA256)
	}
	src := filepath.Join(out, "src")
	if err := os.RemoveAll(out); err != nil {
		return "", err
	}
	prefix := fmt.Sprintf("%s-%s/lib/ubpf/vm/", ubpfCrate, ubpfVersion)
	if err := untarPrefix(body, prefix, src); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	files := []string{"ubpf_vm.c", "ubpf_jit_x86_64.c", "ubpf_loader.c"}
	args := []string{"-O2", "-fPIC", "-shared", "-w", "-I" + filepath.Join(src, "inc"), "-o", lib + ".tmp"}
	for _, f := range files {
		args = append(args, filepath.Join(src, f))
	}
	cmd := exec.Command("cc", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ubpf (cc %s): %v\n%s", strings.Join(args, " "), err, tail(string(b), 2000))
	}
	return lib, os.Rename(lib+".tmp", lib)
}

// untarPrefix writes the regular files of a .tar.gz under prefix to dir.
func untarPrefix(gz []byte, prefix, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel, ok := strings.CutPrefix(h.Name, prefix)
		if !ok || h.Typeflag != tar.TypeReg || rel == "" || strings.Contains(rel, "..") {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(tr, 16<<20))
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no files under %s", prefix)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// PeerResult is what the harness printed for one engine.
type PeerResult struct {
	Program  string  `json:"program"`
	Engine   string  `json:"engine"`
	NsPerRun float64 `json:"ns_per_run,omitempty"`
	// Error says why the engine could not run the program; Differs how its
	// result differed from fastpath-rt's interpreter's.
	Error   string `json:"error,omitempty"`
	Differs string `json:"differs,omitempty"`
}

// HarnessOptions are one call of the harness.
type HarnessOptions struct {
	Harness, Object, Program, Native, UbpfLib string
	Packet                                    []byte
	Maps                                      map[string][]Entry
	Engines                                   []string
	Plugins                                   map[string]string
	Repeat, Rounds, FirstRound                int
}

// RunHarness runs the harness once and returns a result per engine.
func RunHarness(o HarnessOptions) ([]PeerResult, error) {
	dir, err := os.MkdirTemp("", "fastpath-peers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "in.pcap")
	if err := pcap.Write(in, [][]byte{o.Packet}); err != nil {
		return nil, err
	}
	args := []string{"--obj", o.Object, "--in", in, "--repeat", fmt.Sprint(max(o.Repeat, 1)), "--rounds", fmt.Sprint(max(o.Rounds, 1)), "--first-round", fmt.Sprint(o.FirstRound)}
	if o.Program != "" {
		args = append(args, "--prog", o.Program)
	}
	if o.Native != "" {
		args = append(args, "--native", o.Native)
	}
	if o.UbpfLib != "" {
		args = append(args, "--ubpf-lib", o.UbpfLib)
	}
	for n, p := range o.Plugins {
		args = append(args, "--plugin", n+"="+p)
	}
	if len(o.Engines) > 0 {
		args = append(args, "--engines", strings.Join(o.Engines, ","))
	}
	if len(o.Maps) > 0 {
		p := filepath.Join(dir, "maps.json")
		if err := writeMapsFile(p, o.Maps); err != nil {
			return nil, err
		}
		args = append(args, "--maps-in", p)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(o.Harness, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// An engine that crashes takes the harness with it.
		msg := strings.TrimSpace(tail(stderr.String(), 300))
		if msg == "" {
			return nil, fmt.Errorf("the harness %v", err)
		}
		return nil, fmt.Errorf("the harness %v: %s", err, msg)
	}
	var out []PeerResult
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		// An engine's library may print lines of its own.
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r PeerResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("peer harness: bad line %q: %w", line, err)
		}
		out = append(out, r)
	}
	return out, nil
}
