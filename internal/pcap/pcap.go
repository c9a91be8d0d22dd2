// Package pcap reads and writes the Ethernet captures the lab, the border
// router's offline runs and the runtime exchange.
package pcap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Write writes Ethernet frames as a pcap file.
func Write(path string, pkts [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriter(f)
	err = w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	ts := time.Unix(0, 0)
	for i := 0; err == nil && i < len(pkts); i++ {
		err = w.WritePacket(gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(pkts[i]), Length: len(pkts[i])}, pkts[i])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Read reads the Ethernet frames of a pcap or pcapng file. A capture
// that is empty, truncated, not Ethernet, or cut short by the snap length is
// an error naming the file and the packet.
func Read(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read capture: %w", err)
	}
	defer f.Close()
	src, link, err := openCapture(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not a pcap or pcapng file: %w", path, err)
	}
	if link != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("%s: link type %s, the generator sends Ethernet frames only", path, link)
	}
	var pkts [][]byte
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: packet %d: %w", path, len(pkts)+1, err)
		}
		if ci.CaptureLength < ci.Length {
			return nil, fmt.Errorf("%s: packet %d was captured with %d of its %d bytes (snap length): recapture it whole", path, len(pkts)+1, ci.CaptureLength, ci.Length)
		}
		pkts = append(pkts, append([]byte(nil), data...))
	}
	if len(pkts) == 0 {
		return nil, fmt.Errorf("%s: the capture holds no packets", path)
	}
	return pkts, nil
}

type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

func openCapture(f *os.File) (packetSource, layers.LinkType, error) {
	if r, err := pcapgo.NewReader(f); err == nil {
		return r, r.LinkType(), nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return nil, 0, err
	}
	return r, r.LinkType(), nil
}
