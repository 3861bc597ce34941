package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/homa-go/homa/internal/linuxcap"
)

// loadCaptures reads the Homa packets of every capture of the Linux
// module, or returns nil if the captures are not there.
func loadCaptures(tb testing.TB) []linuxcap.Capture {
	dir, ok := linuxcap.Dir()
	if !ok {
		return nil
	}
	caps, err := linuxcap.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return caps
}

// logPath is the decoded log of the capture name.
func logPath(name string) string {
	dir, _ := linuxcap.Dir()
	return filepath.Join(dir, name+".log")
}

// logLine matches a packet line of a capture log, for instance
//
//	6.737ms RX from 10.146.12.2 tos=0xc0 ip_len=176 DATA   500->40000 id=1001   off=0 ...
var logLine = regexp.MustCompile(`^\s*[\d.]+ms (TX|RX from \S+ (tos=\S+ ip_len=\d+)) +(.*)$`)

// logPackets returns the packet lines of a capture's log, each reduced to
// its direction and packet description with single spaces.
func logPackets(t *testing.T, name string) map[string]int {
	f, err := os.Open(logPath(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[string]int{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := logLine.FindStringSubmatch(s.Text()); m != nil {
			dir := "TX"
			if m[2] != "" {
				dir = "RX " + m[2]
			}
			lines[dir+" "+strings.Join(strings.Fields(m[3]), " ")]++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// describe gives a captured packet in the form of a log line.
func describe(pkt linuxcap.Packet, p *Packet) string {
	if pkt.TX {
		return "TX " + p.String()
	}
	return fmt.Sprintf("RX tos=0x%02x ip_len=%d %s", pkt.TOS, pkt.IPLen, p)
}

// TestCaptures decodes every Homa packet the Linux module exchanged in the
// captures, re-encodes it and compares bytes, and matches the decoded
// packets against the capture logs.
func TestCaptures(t *testing.T) {
	caps := loadCaptures(t)
	if caps == nil {
		t.Skip("no captures of the Linux module in interop/testdata/linux-captures")
	}
	total := 0
	byType := map[Type]int{}
	for _, c := range caps {
		t.Run(c.Name, func(t *testing.T) {
			logged := logPackets(t, c.Name)
			missing := map[string]int{}
			for i, pkt := range c.Packets {
				var p Packet
				if err := p.Parse(pkt.Homa); err != nil {
					t.Errorf("packet %d: %v", i, err)
					continue
				}
				total++
				byType[p.Type]++
				if p.Len() != len(pkt.Homa) {
					t.Errorf("packet %d (%v): Len %d, packet %d bytes", i, p.Type, p.Len(), len(pkt.Homa))
				}
				if got := p.header().Checksum; got != binary.BigEndian.Uint16(pkt.Homa[16:]) {
					t.Errorf("packet %d: checksum %#x, bytes %x", i, got, pkt.Homa[16:18])
				}
				out := p.Append(nil)
				if !equalOutside(out, pkt.Homa, 16, 18) {
					t.Errorf("packet %d (%v) re-encodes differently:\n got %x\nwant %x", i, p.Type, out, pkt.Homa)
				}
				key := describe(pkt, &p)
				if logged[key] > 0 {
					logged[key]--
				} else {
					dir := "RX"
					if pkt.TX {
						dir = "TX"
					}
					missing[dir+" "+p.Type.String()]++
				}
			}
			for line, n := range logged {
				if n > 0 {
					t.Errorf("%d× not in the capture: %s", n, line)
				}
			}
			if want := linuxcap.LogGaps[c.Name]; !maps.Equal(missing, want) {
				t.Errorf("packets missing from the log: %v, want %v", missing, want)
			}
		})
	}
	t.Logf("checked %d Homa packets in %d captures: %v", total, len(caps), byType)
	if total == 0 {
		t.Fatal("no Homa packets found")
	}
	for _, typ := range []Type{TypeData, TypeGrant, TypeResend, TypeRPCUnknown, TypeBusy, TypeCutoffs, TypeNeedAck, TypeAck} {
		if byType[typ] == 0 {
			t.Errorf("no %v packet in the captures", typ)
		}
	}
}

// equalOutside reports whether a and b are equal except in [from, to).
func equalOutside(a, b []byte, from, to int) bool {
	return len(a) == len(b) && len(a) >= to &&
		slices.Equal(a[:from], b[:from]) && slices.Equal(a[to:], b[to:])
}

// TestCaptureFields checks a few decoded fields against what the logs and
// the interop README say.
func TestCaptureFields(t *testing.T) {
	caps := loadCaptures(t)
	if caps == nil {
		t.Skip("no captures of the Linux module in interop/testdata/linux-captures")
	}
	find := func(name string, typ Type) []Packet {
		var found []Packet
		for _, c := range caps {
			if c.Name != name {
				continue
			}
			for _, pkt := range c.Packets {
				var p Packet
				if p.Parse(pkt.Homa) == nil && p.Type == typ {
					found = append(found, p)
				}
			}
		}
		return found
	}

	cut := find("05_host_req100_cutoff_version0_cutoffs", TypeCutoffs)
	if len(cut) != 1 {
		t.Fatalf("capture 05: %d CUTOFFS, want 1", len(cut))
	}
	if c := cut[0].Cutoffs; c.Cutoffs != [8]uint32{0, 0, 0, 0, 1000000, 15000, 2800, 200} || c.Version != 1 || c.SenderID != 5001 {
		t.Errorf("capture 05 CUTOFFS: %+v", c)
	}

	// The module as client: ids 12, 14, 16, each request acking the last.
	var ids []uint64
	var acks []AckEntry
	for _, p := range find("09_guest_client_req100x3_to_host_server", TypeData) {
		if p.Data.SrcPort == 32771 {
			ids = append(ids, p.Data.SenderID)
			acks = append(acks, p.Data.Ack)
		}
	}
	if !slices.Equal(ids, []uint64{12, 14, 16}) || !slices.Equal(acks, []AckEntry{{}, {12, 600}, {14, 600}}) {
		t.Errorf("capture 09 requests: ids %v, acks %v", ids, acks)
	}

	// Segmented sends: doff 0xd0, sequence holding the start of the send.
	var segs int
	for _, p := range find("02_host_req200k_guest_echo_full", TypeData) {
		if d := p.Data; d.Doff == DoffDataSegment {
			segs++
			if d.SegOffset == OffsetNone || d.Offset() < d.Sequence || d.MessageLength != 200000 {
				t.Errorf("capture 02 segment: %s", p.String())
			}
		}
	}
	if segs == 0 {
		t.Error("capture 02: no segmented DATA")
	}

	for _, p := range find("11_guest_client_no_response_resend_timeout", TypeResend) {
		if p.Resend.Offset != 0 || p.Resend.Length != ResendToEnd {
			t.Errorf("capture 11: %s", p.String())
		}
	}
	for _, p := range find("10_guest_client_req200k_to_host_server_needack", TypeAck) {
		if e := p.Ack.Entries(); len(e) != 1 || e[0].ServerPort != 600 || e[0].ClientID != p.Ack.SenderID {
			t.Errorf("capture 10: %s", p.String())
		}
	}
}
