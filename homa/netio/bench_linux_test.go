//go:build linux

package netio

import (
	"testing"
)

func BenchmarkRawPingPong(b *testing.B) {
	for _, fam := range families {
		b.Run(fam.name, func(b *testing.B) {
			x, y := openRaw(b, fam.lo, 0, nil), openRaw(b, fam.lo, 0, nil)
			pingPong(b, x, y, fam.lo, fam.lo)
		})
	}
}

// BenchmarkRawPingPongPoll is BenchmarkRawPingPong with both readers
// busy-polling TryReadBatch instead of parking in ReadBatch.
func BenchmarkRawPingPongPoll(b *testing.B) {
	x, y := openRaw(b, lo4, 0, nil), openRaw(b, lo4, 0, nil)
	pingPong(b, polling{x}, polling{y}, lo4, lo4)
}

// BenchmarkEmptyRead is one TryReadBatch of 64 packets on a socket with
// nothing queued: what each turn of a reader spinning on an idle socket
// costs.
func BenchmarkEmptyRead(b *testing.B) {
	for _, k := range sockKinds {
		b.Run(k.name, func(b *testing.B) {
			p := k.open(b, lo4).(Poller)
			pkts := makePackets(maxBatch, 1<<16)
			for b.Loop() {
				if n, err := p.TryReadBatch(pkts); n != 0 || err != nil {
					b.Fatalf("empty read: %d, %v", n, err)
				}
			}
		})
	}
}

func BenchmarkUDPPingPong(b *testing.B) {
	for _, fam := range families {
		b.Run(fam.name, func(b *testing.B) {
			x, y := openUDP(b, fam.lo, 0, nil), openUDP(b, fam.lo, 0, nil)
			pingPong(b, x, y, fam.lo, fam.lo)
		})
	}
}

// BenchmarkUDPPingPongOffloads is BenchmarkUDPPingPong with the offloads
// off, and with GRO read through BorrowReader: what reading through the
// receive area costs a short message.
func BenchmarkUDPPingPongOffloads(b *testing.B) {
	b.Run("off", func(b *testing.B) {
		opt := &Options{DisableGSO: true, DisableGRO: true}
		x, y := openUDP(b, lo4, 0, opt), openUDP(b, lo4, 0, opt)
		pingPong(b, x, y, lo4, lo4)
	})
	b.Run("borrowed", func(b *testing.B) {
		x, y := openUDP(b, lo4, 0, nil), openUDP(b, lo4, 0, nil)
		pingPong(b, borrowing{x}, borrowing{y}, lo4, lo4)
	})
}

// polling is a Conn whose ReadBatch spins on TryReadBatch.
type polling struct{ Conn }

func (p polling) ReadBatch(pkts []Packet) (int, error) {
	for {
		if n, err := p.Conn.(Poller).TryReadBatch(pkts); n > 0 || err != nil {
			return n, err
		}
	}
}

// BenchmarkUDPPingPongReports is BenchmarkUDPPingPong with reports on:
// the hot path must cost the same.
func BenchmarkUDPPingPongReports(b *testing.B) {
	opt := &Options{ReportUnreachable: true}
	x, y := openUDP(b, lo4, 0, opt), openUDP(b, lo4, 0, opt)
	pingPong(b, x, y, lo4, lo4)
}

// BenchmarkUDPReport measures sending a packet to a closed UDP port and
// reading the report, alternately through ReadBatch and through
// WaitReadable then TryReadBatch.
func BenchmarkUDPReport(b *testing.B) {
	x := openUDP(b, lo4, 0, &Options{ReportUnreachable: true})
	dead := openRandomPort(b, func(p uint16) (Conn, error) { return OpenUDP(lo4, p, nil) })
	port := dead.Port()
	dead.Close()
	out := []Packet{{Buf: testPacket(x.Port(), port, 100, 1), N: 100, Addr: lo4}}
	in := makePackets(4, 2048)
	p := x.(Poller)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := x.WriteBatch(out); err != nil {
			b.Fatal(err)
		}
		var n int
		var err error
		if i++; i%2 == 0 {
			n, err = x.ReadBatch(in)
		} else if err = p.WaitReadable(); err == nil {
			n, err = p.TryReadBatch(in)
		}
		if err != nil || n != 1 || in[0].Unreachable != UnreachablePort {
			b.Fatalf("read %d, %v", n, err)
		}
	}
}
