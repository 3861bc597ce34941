package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// hasIPv6Loopback reports whether a socket can bind ::1.
func hasIPv6Loopback() bool {
	c, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// fakePinger echoes in memory; it corrupts round trip bad (if >= 0) and
// blocks until the context ends from round trip stall (if >= 0) on.
type fakePinger struct {
	n, bad, stall int
	buf           []byte
	closed        bool
}

func (f *fakePinger) RoundTrip(ctx context.Context, req []byte) ([]byte, error) {
	defer func() { f.n++ }()
	if f.stall >= 0 && f.n >= f.stall {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.buf = append(f.buf[:0], req...)
	if f.n == f.bad {
		f.buf[len(f.buf)-1] ^= 1
	}
	return f.buf, nil
}

func (f *fakePinger) Close() error { f.closed = true; return nil }

func testLoad(size, count, warmup int, timeout time.Duration) Load {
	return Load{Size: size, Count: count, Warmup: warmup, Timeout: timeout}
}

func TestPingCounts(t *testing.T) {
	f := &fakePinger{bad: -1, stall: -1}
	s, err := Ping(context.Background(), f, testLoad(10, 50, 7, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if f.n != 57 || s.Count != 50 || s.Size != 10 {
		t.Errorf("made %d round trips, summary counts %d of %d bytes; want 57, 50 of 10", f.n, s.Count, s.Size)
	}
	if s.Min <= 0 || s.Max < s.Min || s.Elapsed <= 0 {
		t.Errorf("implausible summary %+v", s)
	}
}

func TestPingMismatch(t *testing.T) {
	f := &fakePinger{bad: 12, stall: -1}
	s, err := Ping(context.Background(), f, testLoad(100, 50, 2, time.Minute))
	if !errors.Is(err, errMismatch) {
		t.Fatalf("err = %v, want a mismatch", err)
	}
	if !strings.Contains(err.Error(), "round trip 12 ") || !strings.Contains(err.Error(), "byte 99") {
		t.Errorf("err = %v, want it to name round trip 12 and byte 99", err)
	}
	if s.Count != 10 || f.n != 13 {
		t.Errorf("stopped with %d measured after %d round trips, want 10 after 13", s.Count, f.n)
	}
}

func TestPingTimeout(t *testing.T) {
	f := &fakePinger{bad: -1, stall: 30}
	s, err := Ping(context.Background(), f, testLoad(8, 100, 10, time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "timed out after 1ms with 20 of 100 round trips done") {
		t.Fatalf("err = %v, want a timeout after 20 round trips", err)
	}
	if s.Count != 20 {
		t.Errorf("summary counts %d, want 20", s.Count)
	}
}

func TestPingInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakePinger{bad: -1, stall: 0}
	_, err := Ping(ctx, f, testLoad(8, 100, 0, time.Minute))
	if err == nil || !strings.Contains(err.Error(), "interrupted with 0 of 100") {
		t.Fatalf("err = %v, want interrupted", err)
	}
}

// TestLoopbackClients calls assorted sizes through every protocol's
// client and in-process server, on IPv4 and IPv6 loopback, and checks
// that a call of the plain-Go baselines (TCP and UDP) and of the floor
// allocates nothing, client and server together.
func TestLoopbackClients(t *testing.T) {
	for _, p := range protocols {
		for _, host := range []string{"127.0.0.1", "::1"} {
			t.Run(p.name+"/"+host, func(t *testing.T) {
				cfg := &Config{Host: netip.MustParseAddr(host), Clients: 1, Conns: 2, InProcess: true}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				rg, err := openRig(ctx, p, cfg, io.Discard)
				if notPermitted(err) {
					t.Skipf("%s: %v", p.name, err)
				}
				if err != nil && host == "::1" && !hasIPv6Loopback() {
					t.Skipf("no %s loopback: %v", host, err)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := rg.Close(); err != nil {
						t.Error(err)
					}
				}()
				c := rg.clients[0]
				var l lane
				defer l.release()
				for _, size := range []int{1, 100, 1400, 9000, 60000, 100_000, 1_000_000} {
					if size > p.maxSize {
						continue
					}
					req := makePattern(size)
					resp, err := c.call(ctx, &l, req)
					if err == nil {
						err = checkReply(req, resp, 0, size)
					}
					if err != nil {
						t.Fatalf("size %d: %v", size, err)
					}
				}
				if !slices.Contains([]string{"tcp", "udp", "floor"}, p.name) {
					return // the others allocate per RPC
				}
				req := make([]byte, 100)
				allocs := testing.AllocsPerRun(100, func() {
					if _, err := c.call(ctx, &l, req); err != nil {
						t.Fatal(err)
					}
				})
				if allocs != 0 {
					t.Errorf("%v allocations per call, want 0", allocs)
				}
			})
		}
	}
}
