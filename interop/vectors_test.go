package interop

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// fromHex decodes hex digits written across lines, ignoring white space
// and "#" comments.
func fromHex(t testing.TB, s string) []byte {
	t.Helper()
	var digits strings.Builder
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// wireVector is a packet written out byte by byte from the table in
// WIRE.md, with the field values it stands for.
type wireVector struct {
	name   string
	hex    string
	fields wire.Packet
}

// Packet constructors that set the type where Parse reports it.
func dataPkt(d wire.Data) wire.Packet {
	d.Type = wire.TypeData
	return wire.Packet{Type: wire.TypeData, Data: d}
}

func grantPkt(g wire.Grant) wire.Packet {
	g.Type = wire.TypeGrant
	return wire.Packet{Type: wire.TypeGrant, Grant: g}
}

func resendPkt(r wire.Resend) wire.Packet {
	r.Type = wire.TypeResend
	return wire.Packet{Type: wire.TypeResend, Resend: r}
}

func cutoffsPkt(c wire.Cutoffs) wire.Packet {
	c.Type = wire.TypeCutoffs
	return wire.Packet{Type: wire.TypeCutoffs, Cutoffs: c}
}

func ackPkt(a wire.Ack) wire.Packet {
	a.Type = wire.TypeAck
	return wire.Packet{Type: wire.TypeAck, Ack: a}
}

func barePkt(t wire.Type, c wire.Common) wire.Packet {
	c.Type = t
	return wire.Packet{Type: t, Common: c}
}

// entry is one acknowledgment.
func entry(id uint64, port uint16) wire.AckEntry {
	return wire.AckEntry{ClientID: id, ServerPort: port}
}

// hdr is a common header with explicit marker bytes.
func hdr(src, dst uint16, seq uint32, doff, flags uint8, csum, urg uint16, id uint64) wire.Common {
	return wire.Common{SrcPort: src, DstPort: dst, Sequence: seq, Doff: doff, Flags: flags, Checksum: csum, Urgent: urg, SenderID: id}
}

// wireVectors are the hand-written vectors. The common header of each is
// laid out on five lines as in WIRE.md: ports; sequence; the unused
// bytes, type, doff, flags and window; checksum and urgent; sender id.
func wireVectors() []wireVector {
	return []wireVector{
		{"DATA: last segment of a 1,000,000-byte response", `
			01f4 9c40                 # 500 -> 40000
			00000000                  # sequence: the send started at 0
			000000 10 d0 06 0000      # DATA, doff 0xd0 (segment), flags 6
			0000 b97d
			00000000000f4241          # sender id 1000001 (odd: the server)
			000f4240                  # message_length 1,000,000
			00009c40                  # incoming 40,000
			0000000000000000 0000     # no piggybacked ack
			0001                      # cutoff_version 1
			00 000000                 # retransmit 0, pad
			000f3cb0                  # offset 998,576
			deadbeef                  # payload
			`, dataPkt(wire.Data{Common: hdr(500, 40000, 0, 0xd0, 6, 0, 0xb97d, 1000001),
			MessageLength: 1_000_000, Incoming: 40_000, CutoffVersion: 1, SegOffset: 998_576,
			Payload: []byte{0xde, 0xad, 0xbe, 0xef}})},
		{"DATA: retransmission, offset in sequence, piggybacked ack", `
			9c40 01f4                 # 40000 -> 500
			00000590                  # sequence 1424: the offset
			000000 10 e0 06 0000
			0000 b97d
			000000000000057c          # sender id 1404 (even: the client)
			00001388                  # message_length 5000
			00001388                  # incoming 5000
			000000000000057a 01f4     # ack (1402, 500)
			0001                      # cutoff_version 1
			01 000000                 # retransmit 1
			ffffffff                  # offset none: use sequence
			78                        # payload "x"
			`, dataPkt(wire.Data{Common: hdr(40000, 500, 1424, 0xe0, 6, 0, 0xb97d, 1404),
			MessageLength: 5000, Incoming: 5000, Ack: wire.AckEntry{ClientID: 1402, ServerPort: 500},
			CutoffVersion: 1, Retransmit: 1, SegOffset: wire.OffsetNone, Payload: []byte("x")})},
		{"DATA: every field at its maximum, no payload", `
			ffff ffff
			ffffffff
			000000 10 f0 ff 0000      # doff 0xf0, every flag bit
			ffff ffff                 # checksum, urgent
			ffffffffffffffff
			ffffffff                  # message_length (a receiver refuses it)
			ffffffff                  # incoming
			ffffffffffffffff ffff     # ack
			ffff                      # cutoff_version
			ff 000000                 # retransmit
			fffffffe                  # the largest offset that is not "none"
			`, dataPkt(wire.Data{Common: hdr(0xffff, 0xffff, 0xffffffff, 0xf0, 0xff, 0xffff, 0xffff, 0xffffffffffffffff),
			MessageLength: 0xffffffff, Incoming: 0xffffffff, Ack: wire.AckEntry{ClientID: 0xffffffffffffffff, ServerPort: 0xffff},
			CutoffVersion: 0xffff, Retransmit: 0xff, SegOffset: 0xfffffffe, Payload: []byte{}})},
		{"GRANT: the whole of a 1,000,000-byte message", `
			01f4 8000                 # 500 -> 32768
			00000000
			000000 11 50 06 0000      # GRANT, doff 0x50
			0000 b97d
			8000000000000001          # sender id 2^63+1
			000f4240                  # offset 1,000,000
			00                        # priority 0
			`, grantPkt(wire.Grant{Common: hdr(500, 32768, 0, 0x50, 6, 0, 0xb97d, 1<<63|1), Offset: 1_000_000})},
		{"GRANT: largest offset and priority byte", `
			0001 fffe
			00000000
			000000 11 50 01 0000      # flags: only bit 0
			1234 0001
			0000000000000003
			ffffffff
			ff
			`, grantPkt(wire.Grant{Common: hdr(1, 0xfffe, 0, 0x50, 1, 0x1234, 1, 3), Offset: 0xffffffff, Priority: 0xff})},
		{"RESEND: everything from offset 1424", `
			0258 8003                 # 600 -> 32771
			00000000
			000000 12 50 06 0000
			0000 b97d
			000000000000000d          # sender id 13
			00000590                  # offset 1424
			ffffffff                  # length: to the end
			00                        # priority 0
			`, resendPkt(wire.Resend{Common: hdr(600, 32771, 0, 0x50, 6, 0, 0xb97d, 13), Offset: 1424, Length: wire.ResendToEnd})},
		{"RESEND: largest offset, length and priority", `
			8000 0001
			00000000
			000000 12 50 80 0000      # flags: only bit 7
			0000 b97d
			fffffffffffffffe
			ffffffff
			fffffffe
			ff
			`, resendPkt(wire.Resend{Common: hdr(32768, 1, 0, 0x50, 0x80, 0, 0xb97d, 0xfffffffffffffffe),
			Offset: 0xffffffff, Length: 0xfffffffe, Priority: 0xff})},
		{"RPC_UNKNOWN: largest ports and id", `
			ffff 8000
			00000000
			000000 13 50 06 0000
			0000 b97d
			ffffffffffffffff
			`, barePkt(wire.TypeRPCUnknown, hdr(0xffff, 32768, 0, 0x50, 6, 0, 0xb97d, 0xffffffffffffffff))},
		{"BUSY: unusual markers", `
			7fff 8000                 # 32767 -> 32768
			00000000
			000000 14 10 20 0000      # doff 0x10, flags 0x20
			ffff 0001
			0000000000000001
			`, barePkt(wire.TypeBusy, hdr(32767, 32768, 0, 0x10, 0x20, 0xffff, 1, 1))},
		{"CUTOFFS: the draft's form, eight distinct entries", `
			01f4 9c40
			00000000
			000000 15 50 06 0000
			0000 b97d
			0000000000001389          # sender id 5001
			000f4240 0007a120 000186a0 0000c350   # 1000000 500000 100000 50000
			00003a98 00000af0 000003e8 000000c8   # 15000 2800 1000 200
			ffff                      # version 65535
			`, cutoffsPkt(wire.Cutoffs{Common: hdr(500, 40000, 0, 0x50, 6, 0, 0xb97d, 5001),
			Cutoffs: [8]uint32{1_000_000, 500_000, 100_000, 50_000, 15_000, 2800, 1000, 200}, Version: 0xffff})},
		{"CUTOFFS: every entry at its maximum, version 0", `
			01f4 9c40
			00000000
			000000 15 50 06 0000
			0000 b97d
			0000000000000001
			ffffffff ffffffff ffffffff ffffffff
			ffffffff ffffffff ffffffff ffffffff
			0000
			`, cutoffsPkt(wire.Cutoffs{Common: hdr(500, 40000, 0, 0x50, 6, 0, 0xb97d, 1),
			Cutoffs: [8]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}})},
		{"NEED_ACK: server id 2^63+1", `
			01f4 8000
			00000000
			000000 17 50 06 0000
			0000 b97d
			8000000000000001
			`, barePkt(wire.TypeNeedAck, hdr(500, 32768, 0, 0x50, 6, 0, 0xb97d, 1<<63|1))},
		{"ACK: num_acks 0, the id in the header only", `
			9c40 01f4
			00000000
			000000 18 50 06 0000
			0000 b97d
			0000000000000fa0          # sender id 4000
			0000                      # num_acks 0
			0000000000000000 0000  0000000000000000 0000  0000000000000000 0000
			0000000000000000 0000  0000000000000000 0000
			`, ackPkt(wire.Ack{Common: hdr(40000, 500, 0, 0x50, 6, 0, 0xb97d, 4000)})},
		{"ACK: num_acks 5, every entry used", `
			8000 0258                 # 32768 -> 600
			00000000
			000000 18 50 06 0000
			0000 b97d
			0000000000000002
			0005                      # num_acks 5
			0000000000000002 0258     # (2, 600)
			0000000000000004 0259     # (4, 601)
			00000000000f4240 7fff     # (1000000, 32767)
			8000000000000000 0001     # (2^63, 1)
			fffffffffffffffe ffff     # (2^64-2, 65535)
			`, ackPkt(wire.Ack{Common: hdr(32768, 600, 0, 0x50, 6, 0, 0xb97d, 2), NumAcks: 5,
			Acks: [wire.MaxAcks]wire.AckEntry{entry(2, 600), entry(4, 601), entry(1_000_000, 32767), entry(1<<63, 1), entry(0xfffffffffffffffe, 0xffff)}})},
		{"ACK: num_acks above the five entries", `
			8000 0258
			00000000
			000000 18 50 06 0000
			0000 b97d
			0000000000000010
			ffff                      # num_acks 65535: only five entries exist
			0000000000000010 0258  0000000000000012 0258  0000000000000014 0258
			0000000000000016 0258  0000000000000018 0258
			`, ackPkt(wire.Ack{Common: hdr(32768, 600, 0, 0x50, 6, 0, 0xb97d, 16), NumAcks: 0xffff,
			Acks: [wire.MaxAcks]wire.AckEntry{entry(16, 600), entry(18, 600), entry(20, 600), entry(22, 600), entry(24, 600)}})},
	}
}

// headerLen is the header length of each type in WIRE.md's table.
var headerLen = map[wire.Type]int{
	wire.TypeData: 56, wire.TypeGrant: 33, wire.TypeResend: 37, wire.TypeRPCUnknown: 28,
	wire.TypeBusy: 28, wire.TypeCutoffs: 62, wire.TypeNeedAck: 28, wire.TypeAck: 80,
}

// TestWireVectors checks every vector both ways: the field values encode
// to exactly the bytes, and the bytes decode to exactly the values.
func TestWireVectors(t *testing.T) {
	covered := map[wire.Type]int{}
	for _, v := range wireVectors() {
		t.Run(v.name, func(t *testing.T) {
			b := fromHex(t, v.hex)
			want := v.fields
			covered[want.Type]++
			n := headerLen[want.Type]
			if want.Type == wire.TypeData {
				n += len(want.Data.Payload)
			}
			if len(b) != n {
				t.Fatalf("vector is %d bytes; WIRE.md makes it %d", len(b), n)
			}
			if got := want.Append(nil); !bytes.Equal(got, b) {
				t.Errorf("encoding the fields:\n got %x\nwant %x", got, b)
			}
			if got := want.Len(); got != len(b) {
				t.Errorf("Len %d, want %d", got, len(b))
			}
			var got wire.Packet
			if err := got.Parse(b); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoding the bytes:\n got %s\nwant %s", got.String(), want.String())
			}
			if short := b[:n-len(want.Data.Payload)-1]; got.Parse(short) == nil {
				t.Errorf("a %d-byte prefix of the header decodes", len(short))
			}
		})
	}
	for typ := range headerLen {
		if covered[typ] == 0 {
			t.Errorf("no vector for %v", typ)
		}
	}
}

// TestWireVectorFields checks derived values of the vectors: the DATA
// offset rule, "to the end" RESENDs, and how many ACK entries count.
func TestWireVectorFields(t *testing.T) {
	wantOffset := map[string]uint32{
		"DATA: last segment of a 1,000,000-byte response":           998_576,
		"DATA: retransmission, offset in sequence, piggybacked ack": 1424,
		"DATA: every field at its maximum, no payload":              0xfffffffe,
	}
	wantAcks := map[string]int{
		"ACK: num_acks 0, the id in the header only": 0,
		"ACK: num_acks 5, every entry used":          5,
		"ACK: num_acks above the five entries":       5,
	}
	for _, v := range wireVectors() {
		var p wire.Packet
		if err := p.Parse(fromHex(t, v.hex)); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		switch p.Type {
		case wire.TypeData:
			if got := p.Data.Offset(); got != wantOffset[v.name] {
				t.Errorf("%s: offset %d, want %d", v.name, got, wantOffset[v.name])
			}
		case wire.TypeAck:
			if got := len(p.Ack.Entries()); got != wantAcks[v.name] {
				t.Errorf("%s: %d entries, want %d", v.name, got, wantAcks[v.name])
			}
		}
	}
}

// TestWireIgnoredBytes: receivers ignore the unused bytes, the window and
// DATA's pad (WIRE.md), and the Ethernet padding after a fixed-size
// header; senders write them as zero.
func TestWireIgnoredBytes(t *testing.T) {
	noisy := fromHex(t, `
		01f4 9c40
		00000000
		a5a5a5 10 e0 06 5a5a      # unused and window bytes set
		0000 b97d
		00000000000003e9
		00000064 00000064
		0000000000000000 0000
		0000
		00 c3c3c3                 # pad set
		00000000
		`)
	want := dataPkt(wire.Data{Common: hdr(500, 40000, 0, 0xe0, 6, 0, 0xb97d, 1001),
		MessageLength: 100, Incoming: 100, Payload: []byte{}})
	var got wire.Packet
	if err := got.Parse(noisy); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoding with noise in ignored bytes: %v\n got %+v\nwant %+v", err, got, want)
	}
	clean := want.Append(nil)
	for _, i := range []int{8, 9, 10, 14, 15, 49, 50, 51} {
		if clean[i] != 0 {
			t.Errorf("encoded byte %d is %#x, want 0", i, clean[i])
		}
	}

	padded := append(fromHex(t, `
		0258 8006
		00000000
		000000 14 50 06 0000
		0000 b97d
		0000000000000019
		`), make([]byte, 18)...) // a BUSY in a minimum-size Ethernet frame
	var busy wire.Bare
	if n, err := busy.Parse(padded); err != nil || n != 28 || busy.Type != wire.TypeBusy || busy.SenderID != 25 {
		t.Errorf("padded BUSY: consumed %d, %v, %+v", n, err, busy)
	}
}
