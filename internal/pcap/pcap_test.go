package pcap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, fill func(w *pcapgo.Writer, f *os.File)) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		fill(pcapgo.NewWriter(f), f)
		f.Close()
		return path
	}
	empty := write("empty.pcap", func(w *pcapgo.Writer, _ *os.File) { w.WriteFileHeader(65535, layers.LinkTypeEthernet) })
	garbage := write("garbage.pcap", func(_ *pcapgo.Writer, f *os.File) { f.WriteString("this is not a capture at all") })
	raw := write("raw.pcap", func(w *pcapgo.Writer, _ *os.File) {
		w.WriteFileHeader(65535, layers.LinkTypeRaw)
		w.WritePacket(gopacket.CaptureInfo{CaptureLength: 20, Length: 20}, make([]byte, 20))
	})
	snapped := write("snapped.pcap", func(w *pcapgo.Writer, _ *os.File) {
		w.WriteFileHeader(64, layers.LinkTypeEthernet)
		w.WritePacket(gopacket.CaptureInfo{CaptureLength: 64, Length: 138}, make([]byte, 64))
	})
	cases := map[string]struct{ path, want string }{
		"missing":   {filepath.Join(dir, "nope.pcap"), "no such file"},
		"empty":     {empty, "holds no packets"},
		"garbage":   {garbage, "not a pcap or pcapng file"},
		"not ether": {raw, "Ethernet frames only"},
		"snapped":   {snapped, "packet 1 was captured with 64 of its 138 bytes"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Read(c.path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
