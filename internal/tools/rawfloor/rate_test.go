package rawfloor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
)

// openRate starts a Rate on host, skipping the test where raw sockets
// (or the address family) are not available.
func openRate(t *testing.T, host string, clients int) *Rate {
	t.Helper()
	return openOrSkip(t, host, func(a netip.Addr) (*Rate, error) { return OpenRate(a, clients) })
}

// rateRequest is the payload of RPC k of slot s of client c: different
// for every RPC, so that a response delivered to the wrong client or
// slot, or an old one, shows.
func rateRequest(c, s, k int) []byte {
	return fmt.Appendf(nil, "client %d slot %d rpc %d %s", c, s, k, bytes.Repeat([]byte{byte(k)}, k%300))
}

// driveRate runs rpcs RPCs on client c with window in flight, checking
// each response against its request.
func driveRate(ctx context.Context, r *Rate, c, window, rpcs int) error {
	cl := r.Client(c)
	reqs := make([][]byte, window)
	count := make([]int, window)
	sent := 0
	for s := range min(window, rpcs) {
		reqs[s] = rateRequest(c, s, 0)
		if err := cl.Send(uint64(s), reqs[s]); err != nil {
			return err
		}
		sent++
	}
	var bad error
	for done := 0; done < rpcs; {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("client %d: %d of %d RPCs done: %w", c, done, rpcs, err)
		}
		n, err := cl.Poll(func(slot uint64, resp []byte) {
			s := int(slot)
			if s >= window || !bytes.Equal(resp, reqs[s]) {
				bad = fmt.Errorf("client %d slot %d: got %q", c, slot, resp)
				return
			}
			if count[s]++; sent < rpcs {
				reqs[s] = rateRequest(c, s, count[s])
				if err := cl.Send(slot, reqs[s]); err != nil {
					bad = err
				}
				sent++
			}
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			return err
		}
		if n == 0 {
			runtime.Gosched()
		}
		done += n
	}
	return nil
}

// TestRate runs many RPCs in flight from several clients at once: each
// gets exactly its own responses, each echoing its request.
func TestRate(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			const clients, window, rpcs = 3, 40, 3000
			r := openRate(t, host, clients)
			ctx := testContext(t)
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Go(func() {
					if err := driveRate(ctx, r, c, window, rpcs); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if r.Served() != clients*rpcs || r.Dropped() != 0 {
				t.Errorf("served %d, dropped %d; want %d, 0", r.Served(), r.Dropped(), clients*rpcs)
			}
		})
	}
}

// TestRateHostile sends the server and a client packets with the
// Rate's tag that do not fit its layout: each is dropped and counted,
// none is answered or completes an RPC, and the RPCs go on.
func TestRateHostile(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			r := openRate(t, host, 2)
			ctx := testContext(t)
			inj, err := openSocket(netip.MustParseAddr(host), match{tag: ^r.tag, kind: kindResponse})
			if err != nil {
				t.Fatal(err)
			}
			defer inj.close()
			inject := func(kind uint32, client uint32, total uint32, n int) {
				t.Helper()
				h := header{tag: r.tag, kind: kind, seq: 1, off: client, total: total}
				if err := inj.send(h.appendTo(nil), pattern(n, 3)); err != nil {
					t.Fatal(err)
				}
			}
			inject(kindRateRequest, 0, 10, 9)                              // not its length
			inject(kindRateRequest, 0, MaxRatePayload+1, MaxRatePayload+1) // longer than a Rate's message
			inject(kindRateRequest, 0, 0, rateRecvLen)                     // longer than its room: truncated
			inject(kindRateResponse, 0, 5, 6)                              // to client 0: not its length
			const malformed = 4
			waitFor(ctx, t, func() bool {
				if _, err := r.Client(0).Poll(func(uint64, []byte) { t.Error("a malformed response completed an RPC") }); err != nil {
					t.Fatal(err)
				}
				return r.Dropped() >= malformed
			})
			if r.Served() != 0 || r.Dropped() != malformed {
				t.Errorf("served %d, dropped %d; want 0, %d", r.Served(), r.Dropped(), malformed)
			}
			for c := range 2 {
				if err := driveRate(ctx, r, c, 8, 100); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRateErrors(t *testing.T) {
	for _, n := range []int{0, RateBatch + 1} {
		if _, err := OpenRate(netip.MustParseAddr("127.0.0.1"), n); err == nil {
			t.Errorf("OpenRate with %d clients: no error", n)
		}
	}
	r := openRate(t, "127.0.0.1", 1)
	cl := r.Client(0)
	if err := cl.Send(0, make([]byte, MaxRatePayload+1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("oversize payload: %v, want ErrTooLong", err)
	}
	// More than a batch queued: the first RateBatch leave at once.
	for s := range RateBatch + 1 {
		if err := cl.Send(uint64(s), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testContext(t)
	got := 0
	waitFor(ctx, t, func() bool {
		n, err := cl.Poll(func(uint64, []byte) {})
		if err != nil {
			t.Fatal(err)
		}
		got += n
		return got == RateBatch+1
	})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Send(0, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// BenchmarkRate is the rate floor: 100-byte RPCs, 128 in flight, on
// IPv4 loopback, from one client socket or four (32 in flight each), all
// driven by one goroutine as bench drives them. The difference is the
// cost of the kernel's clone of each packet for every raw socket of the
// protocol.
func BenchmarkRate(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			r, err := OpenRate(netip.MustParseAddr("127.0.0.1"), clients)
			if errors.Is(err, ErrPermission) {
				b.Skip(err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			req := make([]byte, 100)
			sent, done := 0, 0
			for s := range 128 {
				if err := r.Client(s%clients).Send(uint64(s), req); err != nil {
					b.Fatal(err)
				}
				sent++
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done < b.N {
				read := 0
				for c := range clients {
					cl := r.Client(c)
					n, err := cl.Poll(func(slot uint64, _ []byte) {
						if sent < b.N {
							sent++
							if err := cl.Send(slot, req); err != nil {
								b.Error(err)
							}
						}
					})
					if err != nil {
						b.Fatal(err)
					}
					read += n
				}
				if read == 0 {
					runtime.Gosched()
				}
				done += read
			}
		})
	}
}
