package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/homa-go/homa/internal/pcapfile"
)

// captureDir holds the captures of the Linux module (shared/interop).
var captureDir = filepath.Join("..", "..", "..", "shared", "interop", "linux-captures")

// rawPeer is the address of the raw-socket peer in the captures; packets it
// sent are "TX" in the logs, the module's are "RX".
var rawPeer = netip.MustParseAddr("10.146.12.1")

type capturedPacket struct {
	tx    bool
	tos   uint8
	ipLen int
	homa  []byte
}

type capture struct {
	name    string // file name without extension
	packets []capturedPacket
}

// loadCaptures reads the Homa packets of every capture, or returns nil if
// the captures are not there.
func loadCaptures(tb testing.TB) []capture {
	paths, err := filepath.Glob(filepath.Join(captureDir, "*.pcap"))
	if err != nil || len(paths) == 0 {
		return nil
	}
	var caps []capture
	for _, path := range paths {
		c := capture{name: strings.TrimSuffix(filepath.Base(path), ".pcap")}
		r, err := pcapfile.Open(path)
		if err != nil {
			tb.Fatal(err)
		}
		for rec, err := range r.Records() {
			if err != nil {
				tb.Fatalf("%s: %v", path, err)
			}
			src, _, proto, tos, payload, err := pcapfile.IPPayload(rec.Frame, r.LinkType())
			if err != nil {
				tb.Fatalf("%s: %v", path, err)
			}
			if proto == 146 {
				c.packets = append(c.packets, capturedPacket{tx: src == rawPeer, tos: tos, ipLen: 20 + len(payload), homa: payload})
			}
		}
		r.Close()
		caps = append(caps, c)
	}
	return caps
}

// logLine matches a packet line of a capture log, for instance
//
//	6.737ms RX from 10.146.12.2 tos=0xc0 ip_len=176 DATA   500->40000 id=1001   off=0 ...
var logLine = regexp.MustCompile(`^\s*[\d.]+ms (TX|RX from \S+ (tos=\S+ ip_len=\d+)) +(.*)$`)

// logPackets returns the packet lines of a capture's log, each reduced to
// its direction and packet description with single spaces.
func logPackets(t *testing.T, name string) map[string]int {
	f, err := os.Open(filepath.Join(captureDir, name+".log"))
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
func describe(pkt capturedPacket, p *Packet) string {
	if pkt.tx {
		return "TX " + p.String()
	}
	return fmt.Sprintf("RX tos=0x%02x ip_len=%d %s", pkt.tos, pkt.ipLen, p)
}

// logGaps counts, per capture, the packets the capture holds but its log
// does not show (the logs omit some traffic, and stop before the last
// NEED_ACKs of some runs).
var logGaps = map[string]map[string]int{
	"03_host_req200k_unsched_only_grants_resends":    {"TX DATA": 29},
	"06_host_req100_never_ack_need_ack_repeats":      {"RX NEED_ACK": 1},
	"06b_no_raw_socket_icmp_unreach_aborts_rpc":      {"RX NEED_ACK": 1},
	"10_guest_client_req200k_to_host_server_needack": {"TX DATA": 312, "RX DATA": 284, "TX GRANT": 226, "TX NEED_ACK": 2},
	"14_host_req100x3_piggybacked_acks":              {"RX NEED_ACK": 1},
}

// TestCaptures decodes every Homa packet the Linux module exchanged in the
// captures, re-encodes it and compares bytes, and matches the decoded
// packets against the capture logs.
func TestCaptures(t *testing.T) {
	caps := loadCaptures(t)
	if caps == nil {
		t.Skipf("no captures in %s", captureDir)
	}
	total := 0
	byType := map[Type]int{}
	for _, c := range caps {
		t.Run(c.name, func(t *testing.T) {
			logged := logPackets(t, c.name)
			missing := map[string]int{}
			for i, pkt := range c.packets {
				var p Packet
				if err := p.Parse(pkt.homa); err != nil {
					t.Errorf("packet %d: %v", i, err)
					continue
				}
				total++
				byType[p.Type]++
				if p.Len() != len(pkt.homa) {
					t.Errorf("packet %d (%v): Len %d, packet %d bytes", i, p.Type, p.Len(), len(pkt.homa))
				}
				if got := p.header().Checksum; got != binary.BigEndian.Uint16(pkt.homa[16:]) {
					t.Errorf("packet %d: checksum %#x, bytes %x", i, got, pkt.homa[16:18])
				}
				out := p.Append(nil)
				if !equalOutside(out, pkt.homa, 16, 18) {
					t.Errorf("packet %d (%v) re-encodes differently:\n got %x\nwant %x", i, p.Type, out, pkt.homa)
				}
				key := describe(pkt, &p)
				if logged[key] > 0 {
					logged[key]--
				} else {
					dir := "RX"
					if pkt.tx {
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
			if want := logGaps[c.name]; !maps.Equal(missing, want) {
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
		t.Skipf("no captures in %s", captureDir)
	}
	find := func(name string, typ Type) []Packet {
		var found []Packet
		for _, c := range caps {
			if c.name != name {
				continue
			}
			for _, pkt := range c.packets {
				var p Packet
				if p.Parse(pkt.homa) == nil && p.Type == typ {
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
