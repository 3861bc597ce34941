package pcapfile

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// unhex decodes hex digits, ignoring white space.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// ipv4Packet builds an IPv4 packet (no options) around payload.
func ipv4Packet(tos, proto uint8, src, dst string, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0] = 0x45
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h[8] = 64
	h[9] = proto
	copy(h[12:], netip.MustParseAddr(src).AsSlice())
	copy(h[16:], netip.MustParseAddr(dst).AsSlice())
	return append(h, payload...)
}

// ipv6Packet builds an IPv6 packet whose payload (extension headers
// included) starts with next header nh.
func ipv6Packet(tclass, nh uint8, src, dst string, payload []byte) []byte {
	h := make([]byte, 40, 40+len(payload))
	h[0] = 0x60 | tclass>>4
	h[1] = tclass << 4
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = nh
	h[7] = 64
	copy(h[8:], netip.MustParseAddr(src).AsSlice())
	copy(h[24:], netip.MustParseAddr(dst).AsSlice())
	return append(h, payload...)
}

// ether prepends an Ethernet header with the given VLAN tags and ethertype.
func ether(etherType uint16, vlanTPIDs []uint16, packet []byte) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1} // destination, source
	for _, tpid := range vlanTPIDs {
		f = binary.BigEndian.AppendUint16(f, tpid)
		f = binary.BigEndian.AppendUint16(f, 0x0064) // VLAN 100
	}
	f = binary.BigEndian.AppendUint16(f, etherType)
	return append(f, packet...)
}

func TestIPPayload(t *testing.T) {
	homa := []byte("homa packet")
	v4 := ipv4Packet(0xe0, 146, "10.146.12.2", "10.146.12.1", homa)
	v6 := ipv6Packet(0xc0, 146, "fd00::2", "fd00::1", homa)
	// Hop-by-hop options (8 bytes: next header 60, length 0, padding), then
	// destination options (16 bytes: next header 146, length 1, padding).
	ext := append(unhex(t, "3c00 010400000000  9201 010c000000000000000000000000"), homa...)
	v6ext := ipv6Packet(0x20, 0, "fd00::2", "fd00::1", ext)
	sll := append(unhex(t, "0000 0001 0006 020000000002 0000 0800"), v4...)
	padded := append(ether(0x0800, nil, ipv4Packet(0, 146, "10.146.12.2", "10.146.12.1", []byte{1, 2})), make([]byte, 20)...)

	ok := []struct {
		name     string
		link     LinkType
		frame    []byte
		src, dst string
		tos      uint8
		payload  []byte
	}{
		{"ethernet", LinkEthernet, ether(0x0800, nil, v4), "10.146.12.2", "10.146.12.1", 0xe0, homa},
		{"ethernet padding", LinkEthernet, padded, "10.146.12.2", "10.146.12.1", 0, []byte{1, 2}},
		{"802.1Q", LinkEthernet, ether(0x0800, []uint16{0x8100}, v4), "10.146.12.2", "10.146.12.1", 0xe0, homa},
		{"802.1ad", LinkEthernet, ether(0x86dd, []uint16{0x88a8, 0x8100}, v6), "fd00::2", "fd00::1", 0xc0, homa},
		{"ethernet ipv6", LinkEthernet, ether(0x86dd, nil, v6), "fd00::2", "fd00::1", 0xc0, homa},
		{"ipv6 extension headers", LinkEthernet, ether(0x86dd, nil, v6ext), "fd00::2", "fd00::1", 0x20, homa},
		{"raw ipv4", LinkRaw, v4, "10.146.12.2", "10.146.12.1", 0xe0, homa},
		{"raw ipv6", LinkRaw, v6, "fd00::2", "fd00::1", 0xc0, homa},
		{"raw bsd", LinkRawBSD, v4, "10.146.12.2", "10.146.12.1", 0xe0, homa},
		{"ipv4", LinkIPv4, v4, "10.146.12.2", "10.146.12.1", 0xe0, homa},
		{"ipv6", LinkIPv6, v6, "fd00::2", "fd00::1", 0xc0, homa},
		{"sll", LinkLinuxSLL, sll, "10.146.12.2", "10.146.12.1", 0xe0, homa},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			src, dst, proto, tos, payload, err := IPPayload(tc.frame, tc.link)
			if err != nil {
				t.Fatal(err)
			}
			if src != netip.MustParseAddr(tc.src) || dst != netip.MustParseAddr(tc.dst) {
				t.Errorf("addresses %v -> %v, want %s -> %s", src, dst, tc.src, tc.dst)
			}
			if proto != 146 || tos != tc.tos {
				t.Errorf("proto %d tos %#x, want 146 %#x", proto, tos, tc.tos)
			}
			if !bytes.Equal(payload, tc.payload) {
				t.Errorf("payload %x, want %x", payload, tc.payload)
			}
		})
	}

	fragment := bytes.Clone(v4)
	fragment[6] = 0x20 // more fragments
	badIHL := bytes.Clone(v4)
	badIHL[0] = 0x44
	v6frag := ipv6Packet(0, 44, "fd00::2", "fd00::1", append(unhex(t, "9200 0000 00000001"), homa...))
	bad := []struct {
		name  string
		link  LinkType
		frame []byte
		want  error
	}{
		{"arp", LinkEthernet, ether(0x0806, nil, make([]byte, 28)), ErrUnsupported},
		{"unknown link type", LinkType(147), v4, ErrUnsupported},
		{"short ethernet", LinkEthernet, make([]byte, 13), ErrTruncated},
		{"short vlan", LinkEthernet, ether(0x8100, nil, []byte{0}), ErrTruncated},
		{"short sll", LinkLinuxSLL, make([]byte, 15), ErrTruncated},
		{"empty raw", LinkRaw, nil, ErrTruncated},
		{"short ipv4", LinkIPv4, v4[:19], ErrTruncated},
		{"ipv4 cut before total length", LinkIPv4, v4[:len(v4)-1], ErrTruncated},
		{"ipv4 fragment", LinkIPv4, fragment, ErrUnsupported},
		{"ipv4 header length 16", LinkIPv4, badIHL, ErrCorrupt},
		{"ipv6 in ipv4 link", LinkIPv4, v6, ErrUnsupported},
		{"short ipv6", LinkIPv6, v6[:39], ErrTruncated},
		{"ipv6 cut before payload length", LinkIPv6, v6[:len(v6)-1], ErrTruncated},
		{"ipv6 fragment", LinkIPv6, v6frag, ErrUnsupported},
		{"ipv6 extension cut", LinkIPv6, ipv6Packet(0, 0, "fd00::2", "fd00::1", ext[:6]), ErrTruncated},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, _, _, err := IPPayload(tc.frame, tc.link)
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWriterRoundTrip(t *testing.T) {
	frames := [][]byte{
		ether(0x0800, nil, ipv4Packet(0xe0, 146, "10.0.0.1", "10.0.0.2", []byte("one"))),
		ether(0x0800, []uint16{0x8100}, ipv4Packet(0, 146, "10.0.0.2", "10.0.0.1", make([]byte, 1500))),
		{},
	}
	times := []time.Time{
		time.Date(2025, 11, 22, 4, 35, 0, 123456789, time.UTC),
		time.Date(2025, 11, 22, 4, 35, 1, 999999000, time.UTC),
		time.Unix(0, 0).UTC(),
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		if err := w.WritePacket(times[i], frames[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WritePacket(times[0], make([]byte, writerSnapLen+1)); err == nil {
		t.Error("WritePacket accepted a frame longer than the snap length")
	}
	// The file header, as tcpdump writes it on a little-endian machine.
	if want := unhex(t, "d4c3b2a1 0200 0400 00000000 00000000 00000400 01000000"); !bytes.Equal(buf.Bytes()[:24], want) {
		t.Errorf("file header %x, want %x", buf.Bytes()[:24], want)
	}

	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != LinkEthernet || r.SnapLen() != writerSnapLen {
		t.Errorf("link type %d snap length %d", r.LinkType(), r.SnapLen())
	}
	for i := range frames {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := times[i].Truncate(time.Microsecond); !rec.Time.Equal(want) {
			t.Errorf("record %d: time %v, want %v", i, rec.Time, want)
		}
		if !bytes.Equal(rec.Frame, frames[i]) || rec.OrigLen != len(frames[i]) {
			t.Errorf("record %d: frame of %d bytes (orig %d), want %d", i, len(rec.Frame), rec.OrigLen, len(frames[i]))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last record: %v, want io.EOF", err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}

// TestReaderFormats reads one hand-written record in each byte order and
// timestamp resolution.
func TestReaderFormats(t *testing.T) {
	tests := []struct {
		name string
		file string
		nsec int
	}{
		{"little-endian micro", `d4c3b2a1 0200 0400 00000000 00000000 ffff0000 65000000
			00e1f505 40e20100 04000000 04000000  45000004`, 123456000},
		{"big-endian micro", `a1b2c3d4 0002 0004 00000000 00000000 0000ffff 00000065
			05f5e100 0001e240 00000004 00000004  45000004`, 123456000},
		{"little-endian nano", `4d3cb2a1 0200 0400 00000000 00000000 ffff0000 65000000
			00e1f505 15cd5b07 04000000 04000000  45000004`, 123456789},
		{"big-endian nano", `a1b23c4d 0002 0004 00000000 00000000 0000ffff 00000065
			05f5e100 075bcd15 00000004 00000004  45000004`, 123456789},
		{"fcs bits in link type", `d4c3b2a1 0200 0400 00000000 00000000 ffff0000 65000010
			00e1f505 40e20100 04000000 04000000  45000004`, 123456000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(unhex(t, tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if r.LinkType() != LinkRaw || r.SnapLen() != 0xffff {
				t.Errorf("link type %d snap length %d, want 101 65535", r.LinkType(), r.SnapLen())
			}
			rec, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if want := time.Unix(100000000, int64(tc.nsec)); !rec.Time.Equal(want) {
				t.Errorf("time %v, want %v", rec.Time, want)
			}
			if !bytes.Equal(rec.Frame, []byte{0x45, 0, 0, 4}) {
				t.Errorf("frame %x", rec.Frame)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after the last record: %v, want io.EOF", err)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	header := "d4c3b2a1 0200 0400 00000000 00000000 ffff0000 01000000"
	if _, err := NewReader(bytes.NewReader(unhex(t, "0a0d0d0a 1c000000 4d3c2b1a 0100 0000 ffffffff ffffffff"))); !errors.Is(err, ErrNotPcap) {
		t.Errorf("pcapng file: %v, want ErrNotPcap", err)
	}
	if _, err := NewReader(bytes.NewReader(unhex(t, header)[:23])); !errors.Is(err, ErrNotPcap) {
		t.Errorf("short file header: %v, want ErrNotPcap", err)
	}
	if _, err := NewReader(bytes.NewReader(unhex(t, "d4c3b2a1 0100 0000 00000000 00000000 ffff0000 01000000"))); !errors.Is(err, ErrNotPcap) {
		t.Errorf("version 1: %v, want ErrNotPcap", err)
	}
	records := []struct {
		name   string
		record string
		want   error
	}{
		{"record header cut", "00000000 00000000 0400", io.ErrUnexpectedEOF},
		{"frame cut", "00000000 00000000 04000000 04000000 4500", io.ErrUnexpectedEOF},
		{"frame missing", "00000000 00000000 04000000 04000000", io.ErrUnexpectedEOF},
		{"huge captured length", "00000000 00000000 00000001 00000001", ErrCorrupt},
		{"original shorter than captured", "00000000 00000000 04000000 03000000 45000004", ErrCorrupt},
	}
	for _, tc := range records {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(unhex(t, header+tc.record)))
			if err != nil {
				t.Fatal(err)
			}
			var errs []error
			for _, err := range r.Records() {
				errs = append(errs, err)
			}
			if len(errs) != 1 || !errors.Is(errs[0], tc.want) {
				t.Errorf("Records yielded errors %v, want [%v]", errs, tc.want)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.pcap")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

// TestOpenFile writes a file to disk and reads it back through Open.
func TestOpenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, LinkRaw)
	if err != nil {
		t.Fatal(err)
	}
	packet := ipv4Packet(0xe0, 146, "10.0.0.1", "10.0.0.2", []byte("x"))
	if err := w.WritePacket(time.Unix(1, 0), packet); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	_, _, proto, _, payload, err := IPPayload(rec.Frame, r.LinkType())
	if err != nil || proto != 146 || string(payload) != "x" {
		t.Errorf("IPPayload: proto %d payload %q err %v", proto, payload, err)
	}
}

// TestLinuxCaptures reads the captures of the Linux Homa module.
func TestLinuxCaptures(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "interop", "testdata", "linux-captures")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the captures are part of the repository: %v", err)
	}
	// Frames and Homa packets in each capture (counted independently of
	// this package), and its other IP protocols.
	want := map[string]struct{ frames, homa, icmp int }{
		"01_host_req100_guest_echo":                               {8, 8, 0},
		"02_host_req200k_guest_echo_full":                         {441, 441, 0},
		"03_host_req200k_unsched_only_grants_resends":             {49, 49, 0},
		"04_host_req5000_withhold_pkt1_resend":                    {11, 11, 0},
		"05_host_req100_cutoff_version0_cutoffs":                  {5, 5, 0},
		"06_host_req100_never_ack_need_ack_repeats":               {381, 380, 1},
		"06b_no_raw_socket_icmp_unreach_aborts_rpc":               {11, 10, 1},
		"07_host_resend_unknown_rpc_rpc_unknown":                  {2, 2, 0},
		"08_host_req100_to_unbound_port":                          {1, 1, 0},
		"09_guest_client_req100x3_to_host_server":                 {6, 6, 0},
		"10_guest_client_req200k_to_host_server_needack":          {864, 864, 0},
		"11_guest_client_no_response_resend_timeout":              {20, 20, 0},
		"12_guest_client_req100_host_slow_server_busy":            {12, 12, 0},
		"13_guest_client_req5000_host_withholds_resp_pkt1_resend": {12, 12, 0},
		"14_host_req100x3_piggybacked_acks":                       {8, 7, 1},
	}
	peers := map[netip.Addr]bool{netip.MustParseAddr("10.146.12.1"): true, netip.MustParseAddr("10.146.12.2"): true}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		t.Run(name, func(t *testing.T) {
			r, err := Open(filepath.Join(dir, name+".pcap"))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.LinkType() != LinkEthernet {
				t.Errorf("link type %d", r.LinkType())
			}
			var frames, homa, icmp int
			var last time.Time
			for rec, err := range r.Records() {
				if err != nil {
					t.Fatal(err)
				}
				frames++
				if rec.Time.Before(last) {
					t.Errorf("record %d goes back in time", frames)
				}
				last = rec.Time
				src, dst, proto, _, payload, err := IPPayload(rec.Frame, r.LinkType())
				if err != nil {
					t.Fatalf("record %d: %v", frames, err)
				}
				if !peers[src] || !peers[dst] || src == dst {
					t.Errorf("record %d: %v -> %v", frames, src, dst)
				}
				switch proto {
				case 146:
					homa++
					if len(payload) < 28 {
						t.Errorf("record %d: %d-byte Homa packet", frames, len(payload))
					}
				case 1:
					icmp++
				}
			}
			if frames != w.frames || homa != w.homa || icmp != w.icmp {
				t.Errorf("%d frames, %d Homa, %d ICMP; want %d, %d, %d", frames, homa, icmp, w.frames, w.homa, w.icmp)
			}
		})
	}
}
