package wire

import "testing"

// TestNoAllocs checks that parsing and appending into a large enough buffer
// do not allocate.
func TestNoAllocs(t *testing.T) {
	buf := make([]byte, 0, 2048)
	for _, v := range vectors() {
		b := unhex(t, v.hex)
		p := v.want
		check := func(what string, f func()) {
			t.Helper()
			if n := testing.AllocsPerRun(100, f); n != 0 {
				t.Errorf("%s %s: %v allocations", v.name, what, n)
			}
		}
		check("Packet.Parse", func() { _ = p.Parse(b) })
		check("Packet.Append", func() { buf = p.Append(buf[:0]) })
		check("PeekType", func() { _, _ = PeekType(b) })
		check("ParseCommon", func() { _ = ParseCommon(b, &p.Common) })
		c := typed(&p)
		check("typed Parse", func() { _, _ = c.Parse(b) })
		check("typed Append", func() { buf = c.Append(buf[:0]) })
	}
	d := vectors()[0].want.Data
	if n := testing.AllocsPerRun(100, func() { buf = AppendDataHeader(buf[:0], &d) }); n != 0 {
		t.Errorf("AppendDataHeader: %v allocations", n)
	}
	short := make([]byte, 10)
	var p Packet
	if n := testing.AllocsPerRun(100, func() { _ = p.Parse(short) }); n != 0 {
		t.Errorf("Parse error path: %v allocations", n)
	}
	for typ := TypeData; typ <= TypeAck; typ++ {
		if n := testing.AllocsPerRun(100, func() { _ = typ.String() }); n != 0 {
			t.Errorf("%v.String: %v allocations", typ, n)
		}
	}
}

// benchData is a full-size DATA packet.
func benchData() *Data {
	return &Data{
		Common:        Common{SrcPort: 32768, DstPort: 500, SenderID: 1000},
		MessageLength: 200000, Incoming: 40000, CutoffVersion: 1,
		SegOffset: 1424, Payload: make([]byte, 1424),
	}
}

func BenchmarkDataParse(b *testing.B) {
	pkt := benchData().Append(nil)
	var d Data
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if _, err := d.Parse(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDataAppend(b *testing.B) {
	d := benchData()
	buf := make([]byte, 0, d.Len())
	b.ReportAllocs()
	b.SetBytes(int64(d.Len()))
	for b.Loop() {
		buf = d.Append(buf[:0])
	}
}

func BenchmarkAppendDataHeader(b *testing.B) {
	d := benchData()
	buf := make([]byte, 0, DataLen)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendDataHeader(buf[:0], d)
	}
}

func BenchmarkPacketParse(b *testing.B) {
	pkt := (&Grant{Offset: 50000, Priority: 3}).Append(nil)
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Parse(pkt); err != nil {
			b.Fatal(err)
		}
	}
}
