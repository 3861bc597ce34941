package hcap

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/pcapfile"
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

func TestFind(t *testing.T) {
	busy := (&wire.Bare{Common: wire.Common{Type: wire.TypeBusy, SrcPort: 600, DstPort: 32774, SenderID: 25}}).Append(nil)
	unknown := slices.Clone(busy)
	unknown[11] = 0x42
	at := time.Date(2025, 11, 22, 6, 43, 10, 6603000, time.UTC)
	cases := []struct {
		name   string
		filter Filter
		ip     []byte
		found  bool
		err    error
	}{
		{"Homa", Filter{}, ipv4(ProtoHoma, busy), true, nil},
		{"Homa, port kept", Filter{Ports: []uint16{32774}}, ipv4(ProtoHoma, busy), true, nil},
		{"Homa, other ports", Filter{Ports: []uint16{500}}, ipv4(ProtoHoma, busy), false, nil},
		{"Homa, too short for ports", Filter{Ports: []uint16{600}}, ipv4(ProtoHoma, busy[:3]), false, nil},
		{"Homa, truncated", Filter{}, ipv4(ProtoHoma, busy[:20]), true, wire.ErrShort},
		{"Homa, unknown type", Filter{}, ipv4(ProtoHoma, unknown), true, wire.ErrUnknownType},
		{"TCP", Filter{}, ipv4(6, make([]byte, 20)), false, nil},
		{"UDP without --udp", Filter{}, ipv4(17, udp(600, 32774, 0, busy)), false, nil},
		{"UDP on a Homa port", Filter{UDP: true, Ports: []uint16{600}}, ipv4(17, udp(600, 32774, 0, busy)), true, nil},
		{"UDP on other ports", Filter{UDP: true, Ports: []uint16{601}}, ipv4(17, udp(600, 32774, 0, busy)), false, nil},
		{"UDP length too large", Filter{UDP: true, Ports: []uint16{600}}, ipv4(17, udp(600, 32774, 100, busy)), false, nil},
		{"UDP header cut", Filter{UDP: true, Ports: []uint16{600}}, ipv4(17, []byte{2, 88}), false, nil},
		{"Homa with --udp", Filter{UDP: true, Ports: []uint16{600}}, ipv4(ProtoHoma, busy), false, nil},
	}
	for _, tc := range cases {
		p, ok := tc.filter.Find(tc.ip, pcapfile.LinkRaw, at)
		if ok != tc.found {
			t.Errorf("%s: found %v, want %v", tc.name, ok, tc.found)
			continue
		}
		if !ok {
			continue
		}
		if tc.err == nil && p.Err != nil {
			t.Errorf("%s: %v", tc.name, p.Err)
		}
		if tc.err != nil && !errors.Is(p.Err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, p.Err, tc.err)
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
	if got := p.String(); !strings.HasSuffix(got, "undecodable Homa packet (20 bytes): "+wire.ErrShort.Error()) {
		t.Errorf("String of a bad packet: %s", got)
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
