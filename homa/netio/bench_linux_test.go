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

func BenchmarkUDPPingPong(b *testing.B) {
	for _, fam := range families {
		b.Run(fam.name, func(b *testing.B) {
			x, y := openUDP(b, fam.lo, 0, nil), openUDP(b, fam.lo, 0, nil)
			pingPong(b, x, y, fam.lo, fam.lo)
		})
	}
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
