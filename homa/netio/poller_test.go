package netio

import (
	"net/netip"
	"testing"
	"time"
)

// TestPollerContract checks what the engine's receive path relies on:
// while one goroutine is parked in WaitReadable, TryReadBatch from another
// returns at once; WaitReadable returns when a packet is queued and leaves
// it queued for the reader.
func TestPollerContract(t *testing.T) {
	nw := NewMemNetwork(MemConfig{Seed: 1})
	conns := map[string]func(t *testing.T) (a, b Conn){
		"raw4": func(t *testing.T) (Conn, Conn) {
			return openRaw(t, lo4, 0, nil), openRaw(t, lo4, 0, nil)
		},
		"udp6": func(t *testing.T) (Conn, Conn) {
			open := func(p uint16) (Conn, error) { return OpenUDP(lo6, p, nil) }
			a, b := openRandomPort(t, open), openRandomPort(t, open)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
		"raw6 reports": func(t *testing.T) (Conn, Conn) {
			return openRaw(t, lo6, 0, reportOpts), openRaw(t, lo6, 0, reportOpts)
		},
		"udp4 reports": func(t *testing.T) (Conn, Conn) {
			open := func(p uint16) (Conn, error) { return OpenUDP(lo4, p, reportOpts) }
			a, b := openRandomPort(t, open), openRandomPort(t, open)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
		"mem": func(t *testing.T) (Conn, Conn) {
			a, _ := nw.Open(netip.MustParseAddr("10.0.0.1"), 0)
			b, _ := nw.Open(netip.MustParseAddr("10.0.0.2"), 0)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
	}
	for name, open := range conns {
		t.Run(name, func(t *testing.T) {
			a, b := open(t)
			p := b.(Poller)
			woke := make(chan error, 1)
			go func() { woke <- p.WaitReadable() }()
			time.Sleep(20 * time.Millisecond) // let it park
			pkts := makePackets(4, 2048)
			if n, err := p.TryReadBatch(pkts); n != 0 || err != nil {
				t.Fatalf("TryReadBatch on an empty Conn = %d, %v", n, err)
			}
			select {
			case err := <-woke:
				t.Fatalf("WaitReadable returned with nothing queued: %v", err)
			default:
			}
			writeAll(t, a, b.LocalAddr(), 0, testPacket(a.Port(), b.Port(), 100, 42))
			if err := <-woke; err != nil {
				t.Fatalf("WaitReadable: %v", err)
			}
			var n int
			for range 100 { // the packet may still be on its way to the queue
				if n, _ = p.TryReadBatch(pkts); n > 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if n != 1 || tagOf(pkts[0].Bytes()) != 42 {
				t.Fatalf("after WaitReadable, TryReadBatch read %d packets", n)
			}
		})
	}
}
