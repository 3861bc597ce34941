package homa_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// TestBusyReaderYields: a goroutine in Recv whose reads keep finding
// packets still lets the other goroutines of its processor run, long
// before the packets stop. With one processor, a goroutine made
// runnable just before the reader starts on a backlog of packets (here,
// junk the core drops) runs only when the reader yields: the reader must
// not wait for an empty read to do so, nor leave it to the runtime's
// preemption (10 ms). The backlog takes milliseconds to work through,
// many times busyYield, and the test asserts only which came first.
func TestBusyReaderYields(t *testing.T) {
	conn, err := netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, nil)
	if err != nil {
		t.Fatalf("no UDP socket on loopback: %v", err)
	}
	// A backlog the reader finds in every read: packets that pass the
	// Conn (a common header for its port) and that the core drops (a
	// type Homa does not have).
	const backlog = 8000
	junk := make([]byte, wire.CommonLen)
	binary.BigEndian.PutUint16(junk[2:], conn.Port())
	junk[11] = 0xee
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), conn.Port()))
	sender, err := net.DialUDP("udp", nil, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	for range backlog {
		if _, err := sender.Write(junk); err != nil {
			t.Fatal(err)
		}
	}

	// The endpoint starts on one processor with the backlog queued: the
	// first goroutine to read (the test's, in Recv) finds it all.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := homa.NewEndpoint(conn, homa.Config{})
	defer e.Close()
	seen := make(chan uint64, 1)
	go func() {
		s := e.Stats()
		seen <- s.TotalDrops()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.Recv(ctx, 0); err == nil {
		t.Fatal("Recv returned a message; only junk was sent")
	}
	got := <-seen
	end := e.Stats()
	total := end.TotalDrops()
	t.Logf("the other goroutine ran after %d of %d junk packets", got, total)
	if total < backlog/2 {
		t.Skipf("only %d of %d packets reached the socket", total, backlog)
	}
	if got >= total {
		t.Errorf("the other goroutine ran only once the reader had handled all %d packets", total)
	}
}
