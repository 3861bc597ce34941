package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/homa-go/homa/internal/capture/hcap"
	"github.com/homa-go/homa/internal/capture/pcapfile"
)

// captureSynopsis is the usage line of "homa capture".
const captureSynopsis = "(--file FILE.pcap | --iface NAME) [--count N] [--port P[,P...]] [--udp] [--write OUT.pcap]"

// runCapture is "homa capture", a tcpdump for Homa: it prints the Homa
// packets of a pcap file, or of a live capture on one interface, one per
// line, and can save them to a pcap file.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("capture", captureSynopsis, stderr)
	file := fs.String("file", "", "read the packets of this pcap `FILE`")
	iface := fs.String("iface", "", "capture live on this `INTERFACE`, both directions (needs CAP_NET_RAW)")
	count := fs.Int("count", 0, "stop after `N` Homa packets (0: at the end of the file, or until interrupted)")
	ports := fs.String("port", "", "show only packets from or to these Homa `PORTS` (comma-separated); with --udp, the UDP ports that carry Homa")
	udp := fs.Bool("udp", false, "look for Homa carried in UDP datagrams on the --port ports instead of IP protocol 146")
	write := fs.String("write", "", "also save the frames of the packets shown to this pcap `FILE`")
	var filter hcap.Filter
	check := func() error {
		if (*file == "") == (*iface == "") {
			return errors.New("give exactly one of --file and --iface")
		}
		if *count < 0 {
			return fmt.Errorf("--count %d: must not be negative", *count)
		}
		p, err := hcap.ParsePorts(*ports)
		if err != nil {
			return fmt.Errorf("--port: %v", err)
		}
		filter = hcap.Filter{UDP: *udp, Ports: p}
		if filter.Check() != nil {
			return errors.New("--udp needs --port: the UDP ports that carry Homa")
		}
		return nil
	}
	if code := parseFlags(fs, args, check); code >= 0 {
		return code
	}
	src, err := openFrames(*file, *iface)
	if err != nil {
		return fail(stderr, "capture", err)
	}
	stop := context.AfterFunc(ctx, func() { src.Close() })
	defer stop()
	defer src.Close()
	if *iface != "" {
		fmt.Fprintf(stderr, "homa capture: listening on %s, until %s\n", *iface, untilWhat(*count))
	}
	c := capturer{filter: filter, max: *count, live: *iface != ""}
	err = c.run(ctx, src, *write, stdout)
	fmt.Fprintln(stderr, c.summary())
	if err != nil {
		return fail(stderr, "capture", err)
	}
	return 0
}

// untilWhat says when a live capture stops.
func untilWhat(count int) string {
	if count > 0 {
		return fmt.Sprintf("%d Homa packets or Ctrl-C", count)
	}
	return "Ctrl-C"
}

// frameSource is where captured frames come from: a pcap file or a live
// capture.
type frameSource interface {
	LinkType() pcapfile.LinkType
	// Next returns the next frame, valid until the following call, and
	// io.EOF after the last one.
	Next() (pcapfile.Record, error)
	Close() error
}

// openFrames opens the pcap file path, or else a live capture on iface.
func openFrames(path, iface string) (frameSource, error) {
	if path == "" {
		l, err := hcap.OpenLive(iface)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	r, err := pcapfile.Open(path)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// capturer prints the Homa packets of a frame source.
type capturer struct {
	filter    hcap.Filter
	max       int  // stop after this many packets; 0: never
	live      bool // flush every line
	shown     int  // packets printed
	bad       int  // of which undecodable for another reason than a cut
	truncated int  // of which truncated by the snapshot length
	cut       int  // frames cut too short to tell whether they carry Homa
}

// summary is the line that ends a capture: how many Homa packets were
// shown, how many of them were undecodable or truncated, and how many
// frames were cut too short to tell (when any were).
func (c *capturer) summary() string {
	s := fmt.Sprintf("homa capture: %d Homa packets (%d undecodable, %d truncated by the snapshot length)", c.shown, c.bad, c.truncated)
	if c.cut > 0 {
		s += fmt.Sprintf("; %d frames cut too short to tell whether they carry Homa", c.cut)
	}
	return s
}

// run prints the Homa packets of src until it ends, c.max packets were
// shown, or ctx ends; with a non-empty path it also writes their frames
// to a new pcap file there.
func (c *capturer) run(ctx context.Context, src frameSource, path string, stdout io.Writer) (err error) {
	out := bufio.NewWriter(stdout)
	defer func() { err = errors.Join(err, out.Flush()) }()
	var save *pcapfile.Writer
	if path != "" {
		f, ferr := os.Create(path)
		if ferr != nil {
			return ferr
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		if save, ferr = pcapfile.NewWriter(f, src.LinkType()); ferr != nil {
			return ferr
		}
	}
	for c.max == 0 || c.shown < c.max {
		rec, err := src.Next()
		switch {
		case ctx.Err() != nil || errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		p, v := c.filter.Find(rec.Frame, src.LinkType(), rec.Time.Local())
		if v == hcap.Cut {
			c.cut++
		}
		if v != hcap.Found {
			continue
		}
		c.shown++
		if p.Malformed() {
			c.bad++
		}
		if p.Truncated() {
			c.truncated++
		}
		fmt.Fprintln(out, p.String())
		if save != nil {
			if err := save.WriteRecord(rec); err != nil {
				return err
			}
		}
		if c.live {
			if err := out.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
