package erpc_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// The benchmarks send 32-byte requests and responses, 32 outstanding at
// a time, from one client goroutine to one server goroutine, through bare
// sock and through erpc, over the same transport in the same run, so that
// the layer's cost reads as the ratio of their rates:
//
//	go test -run '^$' -bench Echo32 -benchmem ./sock/erpc/
//
// Each reports RPCs/s; the erpc ones also report their rate over the bare
// sock rate of the same transport measured just before (sock_ratio).

const (
	benchSize        = 32
	benchOutstanding = 32
	benchSessions    = 4 // erpc: 4 sessions of 8 (the default window)
)

// benchTransport opens sockets over one transport.
type benchTransport struct {
	name string
	// open returns a socket at a server port (port != 0) or a client
	// port, and a cleanup.
	open func(b *testing.B, port uint16) *sock.Socket
	// config is the erpc configuration over the transport.
	config func(b *testing.B) *erpc.Config
	host   netip.Addr
	base   uint16 // first port used
}

func benchTransports(b *testing.B) []benchTransport {
	loop := netip.MustParseAddr("127.0.0.1")
	nw := memnet.New(memnet.Config{})
	b.Cleanup(func() { nw.Close() })
	loopback := func(name string, tr sock.Transport, base uint16) benchTransport {
		return benchTransport{
			name: name, host: loop, base: base,
			open: func(b *testing.B, port uint16) *sock.Socket {
				s, err := sock.Open(netip.AddrPortFrom(loop, port), &sock.Config{Transport: tr})
				if errors.Is(err, sock.ErrPortInUse) || errors.Is(err, sock.ErrPermission) {
					b.Skipf("%s on loopback port %d: %v", name, port, err)
				}
				if err != nil {
					b.Fatal(err)
				}
				return s
			},
			config: func(*testing.B) *erpc.Config {
				return &erpc.Config{Socket: &sock.Config{Transport: tr}}
			},
		}
	}
	return []benchTransport{
		loopback("udp", sock.UDP, 29500),
		loopback("raw", sock.Raw, 29700),
		{
			name: "mem", host: serverHost, base: 2000,
			open: func(b *testing.B, port uint16) *sock.Socket {
				c, err := socktest.OpenMem(nw, netip.AddrPortFrom(serverHost, port), nil)
				if err != nil {
					b.Fatal(err)
				}
				return c
			},
			config: func(*testing.B) *erpc.Config {
				return &erpc.Config{Open: func(a netip.AddrPort) (*sock.Socket, error) {
					c, err := socktest.OpenMem(nw, a, nil)
					if err != nil {
						return nil, err
					}
					return c, nil
				}}
			},
		},
	}
}

// BenchmarkEcho32 measures bare sock, erpc, and erpc with exactly-once
// requests on each transport, one after the other. Allocations per RPC
// read best here.
func BenchmarkEcho32(b *testing.B) {
	for _, tr := range benchTransports(b) {
		for _, layer := range []string{"sock", "erpc", "erpc-eo"} {
			b.Run(tr.name+"/"+layer, func(b *testing.B) {
				run := newRunner(b, tr, layer, 0)
				b.ReportAllocs()
				b.ResetTimer()
				d := run(b.N)
				b.ReportMetric(float64(b.N)/d.Seconds(), "RPCs/s")
			})
		}
	}
}

// BenchmarkEcho32Ratio runs bare sock and erpc side by side on each
// transport, alternating in chunks of pairChunk RPCs, so that both see
// the same load on a shared machine; b.N RPCs go through each. It
// reports both rates and erpc's over sock's (sock_ratio).
func BenchmarkEcho32Ratio(b *testing.B) {
	const pairChunk = 500
	for _, tr := range benchTransports(b) {
		for _, layer := range []string{"erpc", "erpc-eo"} {
			b.Run(tr.name+"/"+layer, func(b *testing.B) {
				bare := newRunner(b, tr, "sock", 0)
				layered := newRunner(b, tr, layer, 100)
				bare(pairChunk) // warm both up
				layered(pairChunk)
				b.ResetTimer()
				var dBare, dLayered time.Duration
				for done := 0; done < b.N; done += pairChunk {
					n := min(pairChunk, b.N-done)
					dBare += bare(n)
					dLayered += layered(n)
				}
				sockRate, erpcRate := float64(b.N)/dBare.Seconds(), float64(b.N)/dLayered.Seconds()
				b.ReportMetric(sockRate, "sock_RPCs/s")
				b.ReportMetric(erpcRate, layer+"_RPCs/s")
				b.ReportMetric(erpcRate/sockRate, "sock_ratio")
			})
		}
	}
}

// newRunner sets up a server and a client of layer ("sock", "erpc" or
// "erpc-eo") on tr, using ports from tr.base+portOffset, and returns a
// function that completes n RPCs with benchOutstanding in flight and
// reports how long they took. Cleanup is registered with b.
func newRunner(b *testing.B, tr benchTransport, layer string, portOffset uint16) func(n int) time.Duration {
	if layer == "sock" {
		return sockRunner(b, tr, tr.base+portOffset)
	}
	return erpcRunner(b, tr, tr.base+portOffset, layer == "erpc-eo")
}

// sockRunner: a server goroutine answers with Recv and Reply; the client
// keeps benchOutstanding RPCs going with Send and Recv.
func sockRunner(b *testing.B, tr benchTransport, port uint16) func(int) time.Duration {
	srv := tr.open(b, port)
	cli := tr.open(b, 0)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := srv.Recv(context.Background(), sock.Any)
			if err != nil {
				return
			}
			_ = srv.Reply(m, m.Data)
			m.Release()
		}
	}()
	b.Cleanup(func() { cli.Close(); srv.Close(); wg.Wait() })

	req := make([]byte, benchSize)
	ctx := context.Background()
	return func(n int) time.Duration {
		start := time.Now()
		sent := 0
		for ; sent < min(n, benchOutstanding); sent++ {
			if _, err := cli.Send(srv.LocalAddr(), req, 0); err != nil {
				b.Fatal(err)
			}
		}
		for done := 0; done < n; done++ {
			m, err := cli.Recv(ctx, sock.Any)
			if err != nil || m.Err != nil {
				b.Fatal(err, m.Err)
			}
			if len(m.Data) != benchSize {
				b.Fatalf("response of %d bytes", len(m.Data))
			}
			m.Release()
			if sent < n {
				if _, err := cli.Send(srv.LocalAddr(), req, 0); err != nil {
					b.Fatal(err)
				}
				sent++
			}
		}
		return time.Since(start)
	}
}

// benchClient is the erpc client side: one slot per outstanding request,
// each with its own buffers, re-enqueued from its continuation.
type benchClient struct {
	rpc            *erpc.Rpc
	sent, done, n  int
	opts           []erpc.ReqOption
	cont           erpc.Continuation
	err            error
	slots          []*benchSlot
	completionSize int
}

type benchSlot struct {
	req, resp *erpc.MsgBuffer
	s         erpc.Session
}

func (c *benchClient) issue(sl *benchSlot) {
	c.sent++
	if err := c.rpc.EnqueueRequest(sl.s, 1, sl.req, sl.resp, c.cont, sl, c.opts...); err != nil {
		c.err = err
	}
}

func (c *benchClient) complete(resp *erpc.MsgBuffer, tag any, err error) {
	if err != nil {
		c.err = err
		c.rpc.StopEventLoop()
		return
	}
	c.done++
	c.completionSize = resp.Len()
	if c.sent < c.n {
		c.issue(tag.(*benchSlot))
	}
	if c.done == c.n {
		c.rpc.StopEventLoop()
	}
}

// erpcRunner: a server Rpc with a dispatch echo handler runs its event
// loop in a goroutine; the client Rpc keeps benchOutstanding requests
// going over benchSessions sessions from its continuations.
func erpcRunner(b *testing.B, tr benchTransport, port uint16, eo bool) func(int) time.Duration {
	snx, srv, wg := benchEchoServer(b, tr, port+10)

	cnx, err := erpc.NewNexus(netip.AddrPortFrom(tr.host, port+20), tr.config(b))
	if err != nil {
		b.Fatal(err)
	}
	connected := 0
	rpc, err := cnx.NewRpc(0, func(s erpc.Session, ev erpc.SMEvent, err error) {
		if ev == erpc.Connected {
			connected++
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		rpc.Close()
		cnx.Close()
		snx.Close()
		wg.Wait()
		srv.Close()
	})
	c := &benchClient{rpc: rpc}
	if eo {
		c.opts = []erpc.ReqOption{erpc.ExactlyOnce}
	}
	c.cont = c.complete
	var sessions []erpc.Session
	for range benchSessions {
		s, err := rpc.CreateSession(snx.Addr(), 0)
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	for connected < benchSessions {
		if err := rpc.RunEventLoop(10 * time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	for i := range benchOutstanding {
		req, _ := rpc.AllocMsgBuffer(benchSize)
		resp, _ := rpc.AllocMsgBuffer(benchSize)
		c.slots = append(c.slots, &benchSlot{req: req, resp: resp, s: sessions[i%benchSessions]})
	}
	return func(n int) time.Duration {
		start := time.Now()
		c.sent, c.done, c.n = 0, 0, n
		for _, sl := range c.slots[:min(n, benchOutstanding)] {
			c.issue(sl)
		}
		if err := rpc.Serve(context.Background()); err != nil {
			b.Fatal(err)
		}
		if c.err != nil {
			b.Fatal(c.err)
		}
		if c.completionSize != benchSize {
			b.Fatalf("response of %d bytes", c.completionSize)
		}
		return time.Since(start)
	}
}

// benchEchoServer opens, on tr at port, a Nexus whose Rpc answers
// request type 1 with echo in its event loop, served on a goroutine of
// wg until the Nexus closes; it skips the benchmark when the port or
// the transport is not to be had.
func benchEchoServer(b *testing.B, tr benchTransport, port uint16) (*erpc.Nexus, *erpc.Rpc, *sync.WaitGroup) {
	b.Helper()
	snx, err := erpc.NewNexus(netip.AddrPortFrom(tr.host, port), tr.config(b))
	if errors.Is(err, sock.ErrPortInUse) || errors.Is(err, sock.ErrPermission) {
		b.Skipf("Nexus on %v: %v", tr.name, err)
	}
	if err != nil {
		b.Fatal(err)
	}
	_ = snx.Register(1, echo, erpc.Dispatch)
	srv, err := snx.NewRpc(0, nil)
	if err != nil {
		b.Fatal(err)
	}
	wg := &sync.WaitGroup{}
	wg.Go(func() { _ = srv.Serve(context.Background()) })
	return snx, srv, wg
}
