package rawfloor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// open starts a Pair on host, skipping the test where raw sockets (or
// the address family) are not available.
func open(t *testing.T, host string) *Pair {
	t.Helper()
	p, err := Open(netip.MustParseAddr(host))
	if errors.Is(err, ErrPermission) {
		t.Skip("needs raw IP sockets (root or CAP_NET_RAW), which this process may not open")
	}
	if err != nil {
		t.Skipf("no raw socket on %s: %v", host, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRoundTrip(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			p := open(t, host)
			ctx := testContext(t)
			sizes := []int{0, 1, 100, 1500, 9000, MaxPayload}
			for i, n := range sizes {
				req := bytes.Repeat([]byte{byte(i + 1)}, n)
				got, err := p.RoundTrip(ctx, req)
				if err != nil || !bytes.Equal(got, req) {
					t.Fatalf("%d bytes: got %d bytes, %v", n, len(got), err)
				}
			}
			if p.Served() != uint64(len(sizes)) {
				t.Errorf("served %d, want %d", p.Served(), len(sizes))
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
	if _, err := p.RoundTrip(testContext(t), make([]byte, MaxPayload+1)); !errors.Is(err, ErrTooLong) {
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

// BenchmarkRoundTrip is the floor itself: 100-byte round trips on IPv4
// loopback.
func BenchmarkRoundTrip(b *testing.B) {
	p, err := Open(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		b.Skip(err)
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
