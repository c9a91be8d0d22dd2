package monitor

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// Output writes events: a line each (or a JSON object each) and, if set,
// each frame to a pcapng file with its verdict and reason as the packet's
// comment, or to a classic pcap file.
type Output struct {
	Lines io.Writer // nil: no lines
	JSON  bool
	Ng    *pcap.NgWriter
	Pcap  *pcap.Writer
}

// Comment is an event's pcapng comment: "fw fw-0 drop drop_rule rule=no-dns".
func (e Event) Comment() string {
	c := fmt.Sprintf("%s %s %s %s", e.Function, e.Name, e.Verdict, e.Reason)
	if e.Rule != "" && e.Rule != "default" {
		c += fmt.Sprintf(" rule=%s", e.Rule)
	}
	return c
}

// Write writes one event.
func (o *Output) Write(e Event) error {
	if o.Lines != nil {
		var err error
		if o.JSON {
			var b []byte
			if b, err = json.Marshal(e); err == nil {
				_, err = o.Lines.Write(append(b, '\n'))
			}
		} else {
			_, err = fmt.Fprintln(o.Lines, e.String())
		}
		if err != nil {
			return err
		}
	}
	if o.Ng != nil {
		if err := o.Ng.WritePacket(e.Device, e.Time, e.Data, e.Len, e.Comment()); err != nil {
			return err
		}
		// Each event at once: a reader of a pipe (wireshark -k -i -) sees it live.
		if err := o.Ng.Flush(); err != nil {
			return err
		}
	}
	if o.Pcap != nil {
		if err := o.Pcap.WritePacket(e.Time, e.Data, e.Len); err != nil {
			return err
		}
		if err := o.Pcap.Flush(); err != nil {
			return err
		}
	}
	return nil
}
