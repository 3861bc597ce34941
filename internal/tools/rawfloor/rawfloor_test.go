package rawfloor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"
)

// open starts a Pair on host, skipping the test where raw sockets (or
// the address family) are not available.
func open(t *testing.T, host string) *Pair {
	t.Helper()
	return openOrSkip(t, host, Open)
}

// openOrSkip opens a Pair or a Rate on host with open, closes it when
// the test ends, and skips the test where raw sockets (or the address
// family) are not available.
func openOrSkip[T interface{ Close() error }](t *testing.T, host string, open func(netip.Addr) (T, error)) T {
	t.Helper()
	addr := netip.MustParseAddr(host)
	if addr.Is6() && !hasIPv6Loopback() {
		t.Skip("this host has no IPv6 loopback")
	}
	v, err := open(addr)
	if errors.Is(err, ErrPermission) {
		t.Skip("needs raw IP sockets (root or CAP_NET_RAW), which this process may not open")
	}
	if err != nil {
		t.Fatalf("open on %s: %v", host, err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	return v
}

// hasIPv6Loopback reports whether a socket can bind ::1.
func hasIPv6Loopback() bool {
	c, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pattern is n bytes that differ from packet to packet and from one
// call to the next, so that a payload put at a wrong offset shows.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/MaxPayload*13 + seed)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			p := open(t, host)
			ctx := testContext(t)
			sizes := []int{0, 1, 100, 1500, 9000, MaxPayload, MaxPayload + 1, 200_000, MaxMessage}
			for i, n := range sizes {
				req := pattern(n, i)
				got, err := p.RoundTrip(ctx, req)
				if err != nil || !bytes.Equal(got, req) {
					t.Fatalf("%d bytes: got %d bytes, %v", n, len(got), err)
				}
			}
			if st := p.Stats(); st != (Stats{Served: uint64(len(sizes))}) {
				t.Errorf("stats %+v, want %d served and nothing else", st, len(sizes))
			}
		})
	}
}

// TestInPlace checks that on loopback, which keeps the order of
// packets, every packet of 1 MB round trips is read where it belongs.
func TestInPlace(t *testing.T) {
	p := open(t, "127.0.0.1")
	ctx := testContext(t)
	const trips = 5
	for i := range trips {
		req := pattern(MaxMessage, i)
		got, err := p.RoundTrip(ctx, req)
		if err != nil || !bytes.Equal(got, req) {
			t.Fatalf("round trip %d: got %d bytes, %v", i, len(got), err)
		}
	}
	if st := p.Stats(); st.Moved != 0 || st.Dropped != 0 || st.Served != trips {
		t.Errorf("stats %+v, want %d served and no moves or drops", st, trips)
	}
}

// TestEchoReusesBuffer sends the echo of one round trip as the request
// of the next: the request is sent whole before the response is read
// into the same buffer.
func TestEchoReusesBuffer(t *testing.T) {
	p := open(t, "::1")
	ctx := testContext(t)
	want := pattern(200_000, 3)
	got, err := p.RoundTrip(ctx, want)
	for i := 0; i < 3 && err == nil; i++ {
		got, err = p.RoundTrip(ctx, got)
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
}

// TestHostilePackets sends each end of a Pair packets with its tag that
// do not belong to the round trip it is on: each is dropped or ignored
// and counted, and the round trip goes on.
func TestHostilePackets(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			p := open(t, host)
			ctx := testContext(t)
			// A socket with another tag, whose filter lets nothing in.
			inj, err := openSocket(netip.MustParseAddr(host), match{tag: ^p.tag, kind: kindResponse})
			if err != nil {
				t.Fatal(err)
			}
			defer inj.close()
			if _, err := p.RoundTrip(ctx, []byte("first")); err != nil {
				t.Fatal(err)
			}
			last := p.seq
			inject := func(kind uint32, seq uint64, off, total uint32, n int) {
				t.Helper()
				h := header{tag: p.tag, kind: kind, seq: seq, off: off, total: total}
				if err := inj.send(h.appendTo(nil), pattern(n, 9)); err != nil {
					t.Fatal(err)
				}
			}
			// To the server, whose last round trip was last. Sent from one
			// processor, so that loopback delivers them in order.
			unpin := pinThread(t)
			const req = kindRequest
			inject(req, last+1, 0, MaxMessage+1, MaxPayload)          // dropped: too long
			inject(req, last+1, 1, 100, 99)                           // dropped: not a packet's offset
			inject(req, last+1, 0, 100, 101)                          // dropped: past the total
			inject(req, last+1, 0, 100, 99)                           // dropped: short of the packet's length
			inject(req, last+1, MaxPayload, 100, 0)                   // dropped: a packet past the end
			inject(7, last+1, 0, 0, 0)                                // filtered out: no such kind
			inject(req, 0, 0, 0, 0)                                   // stale: an earlier round trip
			inject(req, last+1, MaxPayload, 2*MaxPayload, MaxPayload) // read at offset 0, moved
			inject(req, last+1, 0, 3*MaxPayload, MaxPayload)          // dropped: total changed
			inject(req, last+1, MaxPayload, 2*MaxPayload, MaxPayload) // stale: a duplicate
			inject(req, last, 0, 5, 5)                                // stale: an earlier round trip
			srv := p.requests
			waitFor(ctx, t, func() bool { return srv.dropped.Load()+srv.stale.Load()+srv.moved.Load() >= 10 })

			// To the client, which reads them on its own here, expecting
			// round trip last+2.
			inject(kindResponse, last, 0, 5, 5)   // stale: an earlier round trip
			inject(kindResponse, last+2, 0, 6, 6) // dropped: not the request's length
			unpin()
			cl := p.responses
			cl.expect(last+2, 5)
			waitFor(ctx, t, func() bool {
				poll(p.client, cl)
				return cl.dropped.Load()+cl.stale.Load() >= 2
			})

			// The client gives up round trip last+1, which the server has
			// begun; the next one replaces it.
			p.seq++
			want := pattern(5, 1)
			got, err := p.RoundTrip(ctx, want)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("got %q, %v", got, err)
			}
			if st, want := p.Stats(), (Stats{Served: 2, Moved: 1, Dropped: 7, Stale: 4}); st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
		})
	}
}

// TestPairsApart runs two Pairs at once on one address: each sees only
// its own packets.
func TestPairsApart(t *testing.T) {
	pairs := []*Pair{open(t, "127.0.0.1"), open(t, "127.0.0.1")}
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(pairs))
	for i, p := range pairs {
		wg.Go(func() {
			for j := range 200 {
				req := fmt.Appendf(nil, "pair %d round trip %d", i, j)
				got, err := p.RoundTrip(ctx, req)
				if err != nil || !bytes.Equal(got, req) {
					errs <- fmt.Errorf("%q: got %q, %v", req, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, p := range pairs {
		if p.Served() != 200 {
			t.Errorf("pair %d served %d, want 200", i, p.Served())
		}
	}
}

func TestErrors(t *testing.T) {
	p := open(t, "127.0.0.1")
	if _, err := p.RoundTrip(testContext(t), make([]byte, MaxMessage+1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("oversize payload: %v, want ErrTooLong", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.RoundTrip(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v, want context.Canceled", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RoundTrip(testContext(t), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// waitFor spins until cond holds, failing the test if ctx ends first.
func waitFor(ctx context.Context, t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
}

// BenchmarkRoundTrip is the floor itself: 100-byte round trips on IPv4
// loopback.
func BenchmarkRoundTrip(b *testing.B) {
	p, err := Open(netip.MustParseAddr("127.0.0.1"))
	if errors.Is(err, ErrPermission) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	req := make([]byte, 100)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.RoundTrip(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTrip1M is the floor for the longest message: 1 MB each
// way on IPv4 loopback, in 16 packets.
func BenchmarkRoundTrip1M(b *testing.B) {
	p, err := Open(netip.MustParseAddr("127.0.0.1"))
	if errors.Is(err, ErrPermission) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := pattern(MaxMessage, 0)
	b.SetBytes(MaxMessage)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.RoundTrip(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Stats().Moved), "moves")
}
