package hcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/capture/pcapfile"
)

// ipv4 builds a raw IPv4 packet (no options) of protocol proto.
func ipv4(proto uint8, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0], h[1] = 0x45, 0xe0
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h[8], h[9] = 64, proto
	copy(h[12:], []byte{10, 146, 12, 2})
	copy(h[16:], []byte{10, 146, 12, 1})
	return append(h, payload...)
}

// udp builds a UDP datagram whose length field is length (0: the real
// length).
func udp(sport, dport uint16, length int, payload []byte) []byte {
	if length == 0 {
		length = 8 + len(payload)
	}
	h := binary.BigEndian.AppendUint16(nil, sport)
	h = binary.BigEndian.AppendUint16(h, dport)
	h = binary.BigEndian.AppendUint16(h, uint16(length))
	h = binary.BigEndian.AppendUint16(h, 0)
	return append(h, payload...)
}

// TestFind: which frames carry a Homa packet under a filter, which do not,
// and which end too soon to tell; a packet that does not decode is found
// with its error, and one the capture cut is found truncated.
func TestFind(t *testing.T) {
	busy := (&wire.Bare{Common: wire.Common{Type: wire.TypeBusy, SrcPort: 600, DstPort: 32774, SenderID: 25}}).Append(nil)
	unknown := slices.Clone(busy)
	unknown[11] = 0x42
	inUDP := ipv4(17, udp(600, 32774, 0, busy))
	at := time.Date(2025, 11, 22, 6, 43, 10, 6603000, time.UTC)
	cases := []struct {
		name      string
		filter    Filter
		ip        []byte
		verdict   Verdict
		err       error
		truncated bool
	}{
		{"Homa", Filter{}, ipv4(ProtoHoma, busy), Found, nil, false},
		{"Homa, port kept", Filter{Ports: []uint16{32774}}, ipv4(ProtoHoma, busy), Found, nil, false},
		{"Homa, other ports", Filter{Ports: []uint16{500}}, ipv4(ProtoHoma, busy), NotFound, nil, false},
		{"Homa, too short for ports", Filter{Ports: []uint16{600}}, ipv4(ProtoHoma, busy[:3]), NotFound, nil, false},
		{"Homa, short header", Filter{}, ipv4(ProtoHoma, busy[:20]), Found, wire.ErrShort, false},
		{"Homa, unknown type", Filter{}, ipv4(ProtoHoma, unknown), Found, wire.ErrUnknownType, false},
		{"Homa, cut in the common header", Filter{}, ipv4(ProtoHoma, busy)[:20+12], Found, wire.ErrShort, true},
		{"Homa, cut before the ports", Filter{}, ipv4(ProtoHoma, busy)[:20+3], Found, wire.ErrShort, true},
		{"Homa, cut before the ports, port filter", Filter{Ports: []uint16{600}}, ipv4(ProtoHoma, busy)[:20+3], Cut, nil, false},
		{"Homa, cut after the ports, port kept", Filter{Ports: []uint16{600}}, ipv4(ProtoHoma, busy)[:20+4], Found, wire.ErrShort, true},
		{"Homa, cut after the ports, other ports", Filter{Ports: []uint16{500}}, ipv4(ProtoHoma, busy)[:20+4], NotFound, nil, false},
		{"IP header cut", Filter{}, ipv4(ProtoHoma, busy)[:19], Cut, nil, false},
		{"TCP", Filter{}, ipv4(6, make([]byte, 20)), NotFound, nil, false},
		{"TCP, cut", Filter{}, ipv4(6, make([]byte, 20))[:30], NotFound, nil, false},
		{"UDP without --udp", Filter{}, inUDP, NotFound, nil, false},
		{"UDP on a Homa port", Filter{UDP: true, Ports: []uint16{600}}, inUDP, Found, nil, false},
		{"UDP on other ports", Filter{UDP: true, Ports: []uint16{601}}, inUDP, NotFound, nil, false},
		{"UDP length too large", Filter{UDP: true, Ports: []uint16{600}}, ipv4(17, udp(600, 32774, 100, busy)), NotFound, nil, false},
		{"UDP header short", Filter{UDP: true, Ports: []uint16{600}}, ipv4(17, []byte{2, 88}), NotFound, nil, false},
		{"UDP header cut", Filter{UDP: true, Ports: []uint16{600}}, inUDP[:20+5], Cut, nil, false},
		{"UDP on a Homa port, cut", Filter{UDP: true, Ports: []uint16{600}}, inUDP[:20+8+10], Found, wire.ErrShort, true},
		{"Homa with --udp", Filter{UDP: true, Ports: []uint16{600}}, ipv4(ProtoHoma, busy), NotFound, nil, false},
	}
	for _, tc := range cases {
		p, v := tc.filter.Find(tc.ip, pcapfile.LinkRaw, at)
		if v != tc.verdict {
			t.Errorf("%s: verdict %v, want %v", tc.name, v, tc.verdict)
			continue
		}
		if v != Found {
			continue
		}
		if tc.err == nil && p.Err != nil {
			t.Errorf("%s: %v", tc.name, p.Err)
		}
		if tc.err != nil && !errors.Is(p.Err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, p.Err, tc.err)
		}
		if p.Truncated() != tc.truncated || p.Malformed() != (tc.err != nil && !tc.truncated) {
			t.Errorf("%s: truncated %v, malformed %v", tc.name, p.Truncated(), p.Malformed())
		}
		if p.Src != netip.MustParseAddr("10.146.12.2") || p.Dst != netip.MustParseAddr("10.146.12.1") || p.TOS != 0xe0 || !p.Time.Equal(at) {
			t.Errorf("%s: %+v", tc.name, p)
		}
	}
	p, _ := (&Filter{}).Find(ipv4(ProtoHoma, busy), pcapfile.LinkRaw, at)
	want := "06:43:10.006603 10.146.12.2 -> 10.146.12.1 BUSY 600->32774 id=25 [homa_len=28 doff=0x50 flags=6 urg=0xb97d csum=0x0000]"
	if got := p.String(); got != want {
		t.Errorf("String:\n got %s\nwant %s", got, want)
	}
	p, _ = (&Filter{}).Find(ipv4(ProtoHoma, busy[:20]), pcapfile.LinkRaw, at)
	if got := p.String(); !strings.HasSuffix(got, " undecodable Homa packet (20 bytes): "+wire.ErrShort.Error()) {
		t.Errorf("String of a bad packet: %s", got)
	}
	p, _ = (&Filter{}).Find(ipv4(ProtoHoma, busy)[:20+12], pcapfile.LinkRaw, at)
	if got := p.String(); !strings.HasSuffix(got, " truncated Homa packet (12 of 28 bytes captured): "+wire.ErrShort.Error()) {
		t.Errorf("String of a packet cut in its header: %s", got)
	}
}

// TestFindTruncatedData: a DATA packet whose payload the capture cut is
// still a DATA packet, with the captured part of its payload, and its line
// says how much was captured; in IP protocol 146 and in UDP alike.
func TestFindTruncatedData(t *testing.T) {
	payload := make([]byte, 1400)
	for i := range payload {
		payload[i] = byte(i)
	}
	data := (&wire.Data{
		Common:        wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 1002, Sequence: 2800},
		MessageLength: 5000,
		Incoming:      5000,
		SegOffset:     wire.OffsetNone,
		Payload:       payload,
	}).Append(nil)
	const kept = 96 // bytes of the Homa packet in the frame
	at := time.Date(2025, 11, 22, 6, 43, 10, 10002000, time.UTC)
	for _, tc := range []struct {
		name   string
		filter Filter
		frame  []byte // whole
		homa   int    // offset of the Homa packet in the frame
	}{
		{"IP", Filter{}, ipv4(ProtoHoma, data), 20},
		{"UDP", Filter{UDP: true, Ports: []uint16{4000}}, ipv4(17, udp(4000, 4000, 0, data)), 28},
	} {
		p, v := tc.filter.Find(tc.frame[:tc.homa+kept], pcapfile.LinkRaw, at)
		if v != Found || p.Err != nil {
			t.Fatalf("%s: verdict %v, error %v", tc.name, v, p.Err)
		}
		d := &p.Decoded.Data
		if !p.Truncated() || p.Malformed() || p.Len != len(data) || len(p.Homa) != kept {
			t.Errorf("%s: truncated %v, malformed %v, %d of %d bytes", tc.name, p.Truncated(), p.Malformed(), len(p.Homa), p.Len)
		}
		if p.Decoded.Type != wire.TypeData || d.SenderID != 1002 || d.Offset() != 2800 || d.MessageLength != 5000 ||
			!slices.Equal(d.Payload, payload[:kept-wire.DataLen]) {
			t.Errorf("%s: decoded %+v", tc.name, p.Decoded)
		}
		line := p.String()
		if !strings.Contains(line, " DATA 40000->500 id=1002 off=2800 ") ||
			!strings.HasSuffix(line, fmt.Sprintf("] [truncated: %d of %d bytes captured]", kept, len(data))) {
			t.Errorf("%s: String: %s", tc.name, line)
		}
	}
}

func TestParsePorts(t *testing.T) {
	for in, want := range map[string][]uint16{"": nil, " ": nil, "500": {500}, "500, 600,65535": {500, 600, 65535}} {
		if got, err := ParsePorts(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParsePorts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65536", "-1", "5x", "500,", ",500", "0x10"} {
		if _, err := ParsePorts(in); err == nil {
			t.Errorf("ParsePorts(%q) accepted", in)
		}
	}
}

func TestFilterCheck(t *testing.T) {
	if err := (&Filter{UDP: true}).Check(); !errors.Is(err, ErrUDPPorts) {
		t.Errorf("UDP without ports: %v", err)
	}
	for _, f := range []Filter{{}, {Ports: []uint16{1}}, {UDP: true, Ports: []uint16{1}}} {
		if err := f.Check(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

func TestOpenLiveUnknownInterface(t *testing.T) {
	if _, err := OpenLive("no-such-interface0"); err == nil {
		t.Error("OpenLive of a missing interface succeeded")
	}
}
