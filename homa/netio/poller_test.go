package netio_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// TestPollerContract checks what the engine's receive path relies on:
// while one goroutine is parked in WaitReadable, TryReadBatch from another
// returns at once; WaitReadable returns when a packet is queued and leaves
// it queued for the reader.
func TestPollerContract(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 1})
	conns := map[string]func(t *testing.T) (a, b netio.Conn){
		"raw4": func(t *testing.T) (netio.Conn, netio.Conn) {
			return netio.OpenRawT(t, netip.MustParseAddr("127.0.0.1"), 0, nil), netio.OpenRawT(t, netip.MustParseAddr("127.0.0.1"), 0, nil)
		},
		"udp6": func(t *testing.T) (netio.Conn, netio.Conn) {
			open := func(p uint16) (netio.Conn, error) { return netio.OpenUDP(netip.MustParseAddr("::1"), p, nil) }
			a, b := netio.OpenRandomPort(t, open), netio.OpenRandomPort(t, open)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
		"raw6 reports": func(t *testing.T) (netio.Conn, netio.Conn) {
			return netio.OpenRawT(t, netip.MustParseAddr("::1"), 0, netio.ReportOpts), netio.OpenRawT(t, netip.MustParseAddr("::1"), 0, netio.ReportOpts)
		},
		"udp4 reports": func(t *testing.T) (netio.Conn, netio.Conn) {
			open := func(p uint16) (netio.Conn, error) {
				return netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), p, netio.ReportOpts)
			}
			a, b := netio.OpenRandomPort(t, open), netio.OpenRandomPort(t, open)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
		"mem": func(t *testing.T) (netio.Conn, netio.Conn) {
			a, _ := nw.Open(netip.MustParseAddr("10.0.0.1"), 0)
			b, _ := nw.Open(netip.MustParseAddr("10.0.0.2"), 0)
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		},
	}
	for name, open := range conns {
		t.Run(name, func(t *testing.T) {
			a, b := open(t)
			p := b.(netio.Poller)
			woke := make(chan error, 1)
			go func() { woke <- p.WaitReadable() }()
			time.Sleep(20 * time.Millisecond) // let it park
			pkts := netio.MakePackets(4, 2048)
			if n, err := p.TryReadBatch(pkts); n != 0 || err != nil {
				t.Fatalf("TryReadBatch on an empty netio.Conn = %d, %v", n, err)
			}
			select {
			case err := <-woke:
				t.Fatalf("WaitReadable returned with nothing queued: %v", err)
			default:
			}
			netio.WriteAll(t, a, b.LocalAddr(), 0, netio.TestPacket(a.Port(), b.Port(), 100, 42))
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
			if n != 1 || netio.TagOf(pkts[0].Bytes()) != 42 {
				t.Fatalf("after WaitReadable, TryReadBatch read %d packets", n)
			}
		})
	}
}
