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
	"github.com/homa-go/homa/homa/memnet"
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

// TestSpinnerYieldsCPU: a caller spinning for its response on a kernel
// socket, once it has found nothing for PollDuration, gives its thread's
// processor up now and then (sched_yield), so that a thread the kernel
// queued on that processor (the server's, woken by the request) need not
// wait for the spin to end; on the in-memory network, whose packets this
// process's goroutines carry, it does not. The server takes the 500 KB
// request and never answers; the caller spins PollDuration (1 ms) plus
// 1 ns a byte of its request past the last grant.
func TestSpinnerYieldsCPU(t *testing.T) {
	spin := func(open func() (netio.Conn, error)) uint64 {
		t.Helper()
		sc, err := open()
		if err != nil {
			t.Fatal(err)
		}
		srv := homa.NewEndpoint(sc, homa.Config{})
		defer srv.Close()
		cc, err := open()
		if err != nil {
			t.Fatal(err)
		}
		cfg := homa.Config{Polling: homa.PollAlways, PollDuration: time.Millisecond}
		e := homa.NewEndpoint(cc, cfg)
		defer e.Close()
		id, err := e.Send(srv.LocalAddr(), make([]byte, 500_000), 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := e.Recv(ctx, id); err == nil {
			t.Fatal("Recv returned a response; the server never answers")
		}
		return homa.CPUYields(e)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	if n := spin(func() (netio.Conn, error) { return netio.OpenUDP(lo, 0, nil) }); n == 0 {
		t.Error("a caller spinning past PollDuration on a UDP socket never yielded its processor")
	} else {
		t.Logf("%d yields of the processor", n)
	}
	nw := memnet.New(memnet.Config{})
	if n := spin(func() (netio.Conn, error) { return nw.Open(netip.MustParseAddr("10.0.0.1"), 0) }); n != 0 {
		t.Errorf("a caller spinning on the in-memory network yielded its processor %d times; want none", n)
	}
}
