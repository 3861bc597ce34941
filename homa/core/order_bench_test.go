package core

import "testing"

// The cost of SRPT ordering a read's batch of 16 packets (rxorder.go):
// one message's stream, which stays in order, and a long message's
// packets with a short request last, which is sorted.
func benchRxOrder(b *testing.B, mixed bool) {
	c := New(Local{Port: 500}, Config{})
	var batch []Inbound
	for i := range 16 {
		batch = append(batch, Inbound{Buf: orderData(2, 40000, 500, 1_000_000, i*1444, 1444), Addr: orderA})
	}
	if mixed {
		batch[15] = Inbound{Buf: orderData(4, 40001, 500, 100, 0, 100), Addr: orderB}
	}
	b.ReportAllocs()
	for b.Loop() {
		c.rxOrder(batch)
	}
}

func BenchmarkRxOrderStream(b *testing.B) { benchRxOrder(b, false) }
func BenchmarkRxOrderMixed(b *testing.B)  { benchRxOrder(b, true) }

// BenchmarkTxSort: the cost of SRPT ordering a call's output of 16 DATA
// packets of a long message, then a GRANT and a short message's packet.
func BenchmarkTxSort(b *testing.B) {
	c := New(Local{Port: 500}, Config{})
	long, short := &rpc{}, &rpc{}
	long.out.length, short.out.length = 1_000_000, 100
	var out Output
	b.ReportAllocs()
	for b.Loop() {
		out.Packets = out.Packets[:0]
		c.out = &out
		c.txBegin()
		for i := range 16 {
			out.Packets = append(out.Packets, Packet{})
			c.txData(long, uint32(i*1444))
		}
		out.Packets = append(out.Packets, Packet{})
		c.txControl()
		out.Packets = append(out.Packets, Packet{})
		c.txData(short, 0)
		c.txEnd()
	}
}
