package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// reserved lists the byte ranges (from WIRE.md) that Parse ignores and
// Append writes as zero.
var reserved = map[Type][][2]int{
	0:        {{8, 11}, {14, 16}}, // every type: unused ack field, window
	TypeData: {{49, 52}},          // pad after retransmit
}

// canonical returns the bytes Append must produce for the packet b of type
// typ: b with the reserved bytes zeroed and zero doff (byte 12), flags (13)
// and urgent (18..19) replaced by the Linux values.
func canonical(b []byte, typ Type) []byte {
	b = bytes.Clone(b)
	for _, r := range append(reserved[0], reserved[typ]...) {
		clear(b[r[0]:r[1]])
	}
	if b[12] == 0 {
		b[12] = 0x50
		if typ == TypeData {
			b[12] = 0xe0
		}
	}
	if b[13] == 0 {
		b[13] = 6
	}
	if b[18] == 0 && b[19] == 0 {
		b[18], b[19] = 0xb9, 0x7d
	}
	return b
}

// checkParse is the property FuzzParse checks: Packet.Parse never panics,
// fails only with an Error, and a packet it accepts re-encodes to the
// canonical form of the input's header range (and payload), which parses
// back to the same packet.
func checkParse(t interface {
	Fatalf(string, ...any)
}, b []byte) {
	var p Packet
	if err := p.Parse(b); err != nil {
		var e Error
		if !errors.As(err, &e) {
			t.Fatalf("Parse error %v is not an Error", err)
		}
		return
	}
	n := p.Len()
	if n > len(b) {
		t.Fatalf("Len %d exceeds the input's %d bytes", n, len(b))
	}
	out := p.Append(nil)
	if want := canonical(b[:n], p.Type); !bytes.Equal(out, want) {
		t.Fatalf("re-encoded %v:\n got %x\nwant %x", p.Type, out, want)
	}
	var q Packet
	if err := q.Parse(out); err != nil {
		t.Fatalf("re-parse: %v", err)
	}
	c := p.header()
	c.Doff, c.Flags, c.Urgent = c.markers(p.Type)
	if !reflect.DeepEqual(q, p) {
		t.Fatalf("re-parse:\n got %+v\nwant %+v", q, p)
	}
	_ = p.String()
}

func FuzzParse(f *testing.F) {
	for _, v := range vectors() {
		f.Add(unhex(f, v.hex))
	}
	// A handful of packets of each kind from every capture.
	seen := map[string]int{}
	for _, c := range loadCaptures(f) {
		for _, pkt := range c.Packets {
			key := c.Name + string(pkt.Homa[offType:offFlags])
			if seen[key] < 3 {
				seen[key]++
				f.Add(pkt.Homa)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParse(t, b) })
}
