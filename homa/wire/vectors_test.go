package wire

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// unhex decodes hex digits, ignoring white space and "#" comments.
func unhex(t testing.TB, s string) []byte {
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

// linux returns a common header with the Linux marker values.
func linux(src, dst uint16, doff uint8, csum uint16, id uint64) Common {
	return Common{SrcPort: src, DstPort: dst, Doff: doff, Flags: FlagsLinux, Checksum: csum, Urgent: UrgentLinux, SenderID: id}
}

// vector is a packet written out by hand from the table in WIRE.md, and the
// decoded form it stands for.
type vector struct {
	name string
	hex  string
	want Packet
}

// vectors returns the hand-written packets. The common header of each is
// laid out on its own lines: ports, sequence, unused+type+doff+flags+window,
// checksum+urgent, sender id.
func vectors() []vector {
	data := func(d Data) Packet { d.Type = TypeData; return Packet{Type: TypeData, Data: d} }
	bare := func(t Type, c Common) Packet { c.Type = t; return Packet{Type: t, Common: c} }

	single := linux(500, 40000, DoffData, 0xc050, 1001)
	single.Sequence = 2848
	segment := linux(500, 40000, DoffDataSegment, 0, 2001)
	distinct := Common{SrcPort: 0x8001, DstPort: 0x0258, Sequence: 0x00012345, Doff: 0xe1, Flags: 0x07, Checksum: 0x1234, Urgent: 0x5678, SenderID: 0x0102030405060708}

	grant := linux(40000, 500, DoffControl, 0, 2000)
	grant.Type = TypeGrant
	resendAll := linux(32774, 600, DoffControl, 0, 24)
	resendAll.Type = TypeResend
	resend := linux(500, 40000, DoffControl, 0xbeef, 3001)
	resend.Type = TypeResend
	cutoffs := linux(500, 40000, DoffControl, 0, 5001)
	cutoffs.Type = TypeCutoffs
	ack := linux(40000, 500, DoffControl, 0, 1000)
	ack.Type = TypeAck

	return []vector{
		{"DATA whole, offset from sequence", `
			01f4 9c40                  # ports 500 -> 40000
			00000b20                   # sequence 2848
			000000 10 e0 06 0000       # unused, DATA, doff, flags, window
			c050 b97d                  # checksum, urgent
			00000000000003e9           # sender id 1001
			00000064                   # message length 100
			00000064                   # incoming 100
			0000000000000000 0000      # ack: none
			0000                       # cutoff version 0
			00 000000                  # retransmit 0, pad
			ffffffff                   # offset: none, use sequence
			686f6d61                   # payload "homa"
			`, data(Data{Common: single, MessageLength: 100, Incoming: 100, SegOffset: OffsetNone, Payload: []byte("homa")})},
		{"DATA segment", `
			01f4 9c40
			00000000                   # sequence 0: the start of the whole send
			000000 10 d0 06 0000       # doff 0xd0: cut from a larger send
			0000 b97d
			00000000000007d1           # sender id 2001
			00030d40                   # message length 200000
			00009c40                   # incoming 40000
			0000000000000000 0000
			0000
			00 000000
			00000590                   # offset 1424
			6162                       # payload "ab"
			`, data(Data{Common: segment, MessageLength: 200000, Incoming: 40000, SegOffset: 1424, Payload: []byte("ab")})},
		{"DATA every field distinct", `
			8001 0258
			00012345
			000000 10 e1 07 0000
			1234 5678
			0102030405060708
			000f4240                   # message length 1000000
			0000a000                   # incoming 40960
			000000000000000c 0259      # ack: client id 12, server port 601
			0102                       # cutoff version 258
			01 000000                  # retransmit 1
			00012000                   # offset 73728
			`, data(Data{Common: distinct, MessageLength: 1000000, Incoming: 40960, Ack: AckEntry{12, 601}, CutoffVersion: 258, Retransmit: 1, SegOffset: 0x12000, Payload: []byte{}})},
		{"GRANT", `
			9c40 01f4
			00000000
			000000 11 50 06 0000
			0000 b97d
			00000000000007d0           # sender id 2000
			0000c350                   # offset 50000
			03                         # priority 3
			`, Packet{Type: TypeGrant, Grant: Grant{Common: grant, Offset: 50000, Priority: 3}}},
		{"RESEND to end", `
			8006 0258
			00000000
			000000 12 50 06 0000
			0000 b97d
			0000000000000018           # sender id 24
			00000000                   # offset 0
			ffffffff                   # length: everything
			07                         # priority 7
			`, Packet{Type: TypeResend, Resend: Resend{Common: resendAll, Length: ResendToEnd, Priority: 7}}},
		{"RESEND range", `
			01f4 9c40
			00000000
			000000 12 50 06 0000
			beef b97d
			0000000000000bb9           # sender id 3001
			00009c40                   # offset 40000
			00002710                   # length 10000
			05                         # priority 5
			`, Packet{Type: TypeResend, Resend: Resend{Common: resend, Offset: 40000, Length: 10000, Priority: 5}}},
		{"CUTOFFS", `
			01f4 9c40
			00000000
			000000 15 50 06 0000
			0000 b97d
			0000000000001389           # sender id 5001
			00000000 00000000 00000000 00000000
			000f4240 00003a98 00000af0 000000c8  # 1000000 15000 2800 200
			0001                       # version 1
			`, Packet{Type: TypeCutoffs, Cutoffs: Cutoffs{Common: cutoffs, Cutoffs: [8]uint32{0, 0, 0, 0, 1000000, 15000, 2800, 200}, Version: 1}}},
		{"ACK two entries", `
			9c40 01f4
			00000000
			000000 18 50 06 0000
			0000 b97d
			00000000000003e8           # sender id 1000
			0002                       # num_acks 2
			00000000000003e8 01f4      # (1000, 500)
			00000000000003ea 01f5      # (1002, 501)
			0000000000000000 0000
			0000000000000000 0000
			0000000000000000 0000
			`, Packet{Type: TypeAck, Ack: Ack{Common: ack, NumAcks: 2, Acks: [MaxAcks]AckEntry{{1000, 500}, {1002, 501}}}}},
		{"RPC_UNKNOWN", `
			01f4 9c40
			00000000
			000000 13 50 06 0000
			0000 b97d
			0000000000001b59           # sender id 7001
			`, bare(TypeRPCUnknown, linux(500, 40000, DoffControl, 0, 7001))},
		{"BUSY", `
			0258 8006
			00000000
			000000 14 50 06 0000
			0000 b97d
			0000000000000019           # sender id 25
			`, bare(TypeBusy, linux(600, 32774, DoffControl, 0, 25))},
		{"NEED_ACK", `
			01f4 9c40
			00000000
			000000 17 50 06 0000
			a5a5 b97d
			00000000000003e9           # sender id 1001
			`, bare(TypeNeedAck, linux(500, 40000, DoffControl, 0xa5a5, 1001))},
		{"FREEZE", `
			01f4 9c40
			00000000
			000000 16 50 06 0000
			0000 b97d
			00000000000003e9
			`, bare(TypeFreeze, linux(500, 40000, DoffControl, 0, 1001))},
	}
}

func TestVectors(t *testing.T) {
	wantLen := map[Type]int{TypeGrant: 33, TypeResend: 37, TypeCutoffs: 62, TypeAck: 80,
		TypeRPCUnknown: 28, TypeBusy: 28, TypeNeedAck: 28, TypeFreeze: 28}
	for _, v := range vectors() {
		t.Run(v.name, func(t *testing.T) {
			b := unhex(t, v.hex)
			if n, ok := wantLen[v.want.Type]; ok && len(b) != n {
				t.Fatalf("vector is %d bytes, WIRE.md says %d", len(b), n)
			}
			var got Packet
			if err := got.Parse(b); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, v.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, v.want)
			}
			if enc := v.want.Append(nil); !bytes.Equal(enc, b) {
				t.Errorf("Append:\n got %x\nwant %x", enc, b)
			}
			if n := v.want.Len(); n != len(b) {
				t.Errorf("Len %d, want %d", n, len(b))
			}
		})
	}
}

// TestTypedVectors runs every vector through its typed Parse and Append.
func TestTypedVectors(t *testing.T) {
	for _, v := range vectors() {
		t.Run(v.name, func(t *testing.T) {
			b := unhex(t, v.hex)
			want := typed(&v.want)
			got := reflect.New(reflect.TypeOf(want).Elem()).Interface().(codec)
			n, err := got.Parse(b)
			if err != nil || n != len(b) {
				t.Fatalf("Parse = %d, %v; want %d, nil", n, err, len(b))
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
			}
			prefix := []byte{0xaa, 0xbb}
			if enc := want.Append(prefix); !bytes.Equal(enc, append(prefix, b...)) {
				t.Errorf("Append after a prefix:\n got %x\nwant aabb%x", enc, b)
			}
			if want.Len() != len(b) {
				t.Errorf("Len %d, want %d", want.Len(), len(b))
			}
		})
	}
}

// codec is the method set every packet type has.
type codec interface {
	Append([]byte) []byte
	Len() int
	Parse([]byte) (int, error)
}

// typed returns the packet inside p as its own type: &p.Data for DATA and
// so on, and a Bare holding p.Common for the header-only types.
func typed(p *Packet) codec {
	switch p.Type {
	case TypeData:
		return &p.Data
	case TypeGrant:
		return &p.Grant
	case TypeResend:
		return &p.Resend
	case TypeCutoffs:
		return &p.Cutoffs
	case TypeAck:
		return &p.Ack
	}
	return &Bare{p.Common}
}

// TestDataOffset checks the DATA offset rule on the vectors.
func TestDataOffset(t *testing.T) {
	want := map[string]uint32{
		"DATA whole, offset from sequence": 2848,
		"DATA segment":                     1424,
		"DATA every field distinct":        0x12000,
	}
	for _, v := range vectors() {
		if v.want.Type != TypeData {
			continue
		}
		var d Data
		if _, err := d.Parse(unhex(t, v.hex)); err != nil {
			t.Fatal(err)
		}
		if got := d.Offset(); got != want[v.name] {
			t.Errorf("%s: Offset %d, want %d", v.name, got, want[v.name])
		}
	}
}

// TestLinuxDefaults checks that zero Doff, Flags and Urgent encode as the
// Linux values: the vectors with Linux markers encode the same without them.
func TestLinuxDefaults(t *testing.T) {
	for _, v := range vectors() {
		p := v.want
		c := p.header()
		if c.Flags != FlagsLinux || c.Urgent != UrgentLinux || c.Doff == DoffDataSegment {
			continue // carries non-default markers
		}
		c.Doff, c.Flags, c.Urgent = 0, 0, 0
		if got, want := p.Append(nil), unhex(t, v.hex); !bytes.Equal(got, want) {
			t.Errorf("%s with zero markers:\n got %x\nwant %x", v.name, got, want)
		}
	}
}

// TestTypeIgnoredOnAppend checks that typed packets write their own type,
// whatever Common.Type says.
func TestTypeIgnoredOnAppend(t *testing.T) {
	g := Grant{Common: Common{Type: TypeBusy}}
	if b := g.Append(nil); Type(b[offType]) != TypeGrant {
		t.Errorf("Grant with Common.Type BUSY encoded as type %#x", b[offType])
	}
}

func TestAckEntries(t *testing.T) {
	a := Ack{Acks: [MaxAcks]AckEntry{{2, 1}, {4, 1}, {6, 1}, {8, 1}, {10, 1}}}
	for _, tc := range []struct {
		num  uint16
		want int
	}{{0, 0}, {2, 2}, {5, 5}, {6, 5}, {0xffff, 5}} {
		a.NumAcks = tc.num
		if got := a.Entries(); len(got) != tc.want || (tc.want > 0 && got[0] != a.Acks[0]) {
			t.Errorf("NumAcks %d: %d entries, want %d", tc.num, len(got), tc.want)
		}
	}
}

func TestTypeString(t *testing.T) {
	want := map[Type]string{
		TypeData: "DATA", TypeGrant: "GRANT", TypeResend: "RESEND", TypeRPCUnknown: "RPC_UNKNOWN",
		TypeBusy: "BUSY", TypeCutoffs: "CUTOFFS", TypeFreeze: "FREEZE", TypeNeedAck: "NEED_ACK",
		TypeAck: "ACK", 0x42: "UNKNOWN(0x42)", 0: "UNKNOWN(0x00)",
	}
	for typ, s := range want {
		if got := typ.String(); got != s {
			t.Errorf("Type(%#x).String() = %q, want %q", uint8(typ), got, s)
		}
	}
}

// TestPacketString checks the one-line format against lines of the
// capture logs.
func TestPacketString(t *testing.T) {
	want := map[string]string{
		"DATA whole, offset from sequence": "DATA 500->40000 id=1001 off=2848 seq=2848 seg_off=NONE(-1) paylen=4 msg_len=100 incoming=100 ack=(0,0) cutoff_ver=0 rexmit=0 [homa_len=60 doff=0xe0 flags=6 urg=0xb97d csum=0xc050]",
		"DATA segment":                     "DATA 500->40000 id=2001 off=1424 seq=0 seg_off=1424 paylen=2 msg_len=200000 incoming=40000 ack=(0,0) cutoff_ver=0 rexmit=0 [homa_len=58 doff=0xd0 flags=6 urg=0xb97d csum=0x0000]",
		"GRANT":                            "GRANT 40000->500 id=2000 offset=50000 priority=3 [homa_len=33 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
		"RESEND to end":                    "RESEND 32774->600 id=24 offset=0 length=-1 priority=7 [homa_len=37 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
		"RESEND range":                     "RESEND 500->40000 id=3001 offset=40000 length=10000 priority=5 [homa_len=37 doff=0x50 flags=6 urg=0xb97d csum=0xbeef]",
		"CUTOFFS":                          "CUTOFFS 500->40000 id=5001 cutoffs=[0, 0, 0, 0, 1000000, 15000, 2800, 200] version=1 [homa_len=62 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
		"ACK two entries":                  "ACK 40000->500 id=1000 num_acks=2 acks=[(1000, 500), (1002, 501)] [homa_len=80 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
		"BUSY":                             "BUSY 600->32774 id=25 [homa_len=28 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
	}
	for _, v := range vectors() {
		if w, ok := want[v.name]; ok {
			if got := v.want.String(); got != w {
				t.Errorf("%s:\n got %s\nwant %s", v.name, got, w)
			}
		}
	}
	// Zero markers print as the Linux values Append writes.
	p := Packet{Type: TypeNeedAck, Common: Common{SrcPort: 1, DstPort: 2, SenderID: 3}}
	if got, w := p.String(), "NEED_ACK 1->2 id=3 [homa_len=28 doff=0x50 flags=6 urg=0xb97d csum=0x0000]"; got != w {
		t.Errorf("zero markers:\n got %s\nwant %s", got, w)
	}
}
