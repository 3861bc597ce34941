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
// before the packets stop. With one processor, another goroutine runs
// only when the reader yields: the reader must not wait for an empty
// read to do so, nor leave it to the runtime's preemption (10 ms), but
// yield once it has gone busyYield (100 µs) without. The other goroutine
// notes the reader's count of dropped junk each time it runs; the test
// asserts the largest count between two of its turns. Here the reader
// drops a packet in 0.4-0.8 µs, so 100 µs is 110-230 packets (a batch is
// 16); maxGap allows a machine several times as fast. A loaded machine
// only lowers the count (the clock runs on while the reader waits for
// the processor). Without the yield the gap was 4,000-8,000 packets in
// 8 runs of 8.
func TestBusyReaderYields(t *testing.T) {
	conn, err := netio.OpenUDP(netip.MustParseAddr("127.0.0.1"), 0, nil)
	if err != nil {
		t.Fatalf("no UDP socket on loopback: %v", err)
	}
	// A backlog the reader finds in every read: packets that pass the
	// Conn (a common header for its port) and that the core drops (a
	// type Homa does not have).
	const backlog = 8000
	const maxGap = 1000 // packets between two turns of the other goroutine
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
	// The other goroutine notes how many packets the reader has dropped
	// each time it gets the processor, and gives it back at once.
	stop := make(chan struct{})
	seen := make(chan []uint64, 1)
	go func() {
		var at []uint64
		for {
			select {
			case <-stop:
				seen <- at
				return
			default:
			}
			s := e.Stats()
			if d := s.TotalDrops(); len(at) == 0 || d != at[len(at)-1] {
				at = append(at, d)
			}
			runtime.Gosched()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = e.Recv(ctx, 0)
	close(stop)
	at := <-seen
	if err == nil {
		t.Fatal("Recv returned a message; only junk was sent")
	}
	end := e.Stats()
	total := end.TotalDrops()
	if total < backlog/2 {
		t.Fatalf("only %d of %d packets reached the socket", total, backlog)
	}
	gap, prev := uint64(0), uint64(0)
	for _, d := range append(at, total) {
		gap, prev = max(gap, d-prev), d
	}
	t.Logf("the other goroutine ran %d times; at most %d of %d junk packets in between", len(at), gap, total)
	if gap > maxGap {
		t.Errorf("the reader handled %d packets without yielding; want at most %d", gap, maxGap)
	}
}
