package sock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
)

var echoSizes = []int{1, 1400, 40_000, 40_001, 200_000, 1_000_000}

// transports lists every way a socket can be opened on loopback.
var transports = []struct {
	name string
	addr string
	tr   sock.Transport
}{
	{"raw4", "127.0.0.1", sock.Raw},
	{"raw6", "::1", sock.Raw},
	{"udp4", "127.0.0.1", sock.UDP},
	{"udp6", "::1", sock.UDP},
}

// openPair opens an echo server socket and a client socket, or skips the
// test when the transport needs privileges the process lacks.
func openPair(t *testing.T, host string, tr sock.Transport, port uint16) (server, client *sock.Socket) {
	t.Helper()
	addr := netip.MustParseAddr(host)
	server, err := sock.Open(netip.AddrPortFrom(addr, port), &sock.Config{Transport: tr})
	if errors.Is(err, sock.ErrPermission) {
		t.Skipf("skipping %v transport: %v", tr, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	client, err = sock.Open(netip.AddrPortFrom(addr, 0), &sock.Config{Transport: tr})
	if err != nil {
		server.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveEcho(server, nil)
		}()
	}
	t.Cleanup(func() {
		client.Close()
		server.Close()
		wg.Wait()
	})
	return server, client
}

// serveEcho answers every request with its own bytes, prefixed by tag.
func serveEcho(s *sock.Socket, tag []byte) {
	for {
		m, err := s.Recv(context.Background(), sock.Any)
		if err != nil {
			return
		}
		_ = s.Reply(m, append(tag, m.Data...))
		m.Release()
	}
}

// checkDrops checks that server dropped nothing of what client sent over
// loopback, save the late duplicates a busy machine causes: a client
// whose response (or a server whose request) is late by a resend
// interval asks again, and the RESEND or the retransmission it brings
// may arrive after the server has finished the RPC, which drops it as
// stale. A stale drop with no RESEND or retransmission to explain it is
// an error.
func checkDrops(t *testing.T, server, client *sock.Socket) {
	t.Helper()
	st, ct := server.Stats(), client.Stats()
	d := maps.Clone(st.Drops)
	if late := ct.ResendsSent + ct.ResentPackets; d[sock.DropStale] <= late {
		delete(d, sock.DropStale)
	}
	if len(d) != 0 {
		t.Errorf("server dropped packets: %v (client sent %d RESENDs and retransmitted %d packets)",
			st.Drops, ct.ResendsSent, ct.ResentPackets)
	}
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func call(t testing.TB, c *sock.Socket, dst netip.AddrPort, req []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := c.Call(ctx, dst, req)
	if err != nil {
		return fmt.Errorf("call with %d bytes: %w", len(req), err)
	}
	defer m.Release()
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("echo of %d bytes differs (got %d bytes)", len(req), len(m.Data))
	}
	return nil
}

func TestEcho(t *testing.T) {
	for i, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			server, client := openPair(t, tc.addr, tc.tr, uint16(21000+i))
			for _, n := range echoSizes {
				if err := call(t, client, server.LocalAddr(), payload(uint64(i), n)); err != nil {
					t.Fatal(err)
				}
			}
			checkDrops(t, server, client)
		})
	}
}

// TestConcurrent: 1,000 RPCs from 8 goroutines at once, over each
// transport.
func TestConcurrent(t *testing.T) {
	for i, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			server, client := openPair(t, tc.addr, tc.tr, uint16(21100+i))
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := w; k < 1000; k += 8 {
						size := []int{1, 100, 1400, 9000, 50_000}[k%5]
						if err := call(t, client, server.LocalAddr(), payload(uint64(k), size)); err != nil {
							errs <- fmt.Errorf("rpc %d: %w", k, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := server.Stats().RequestsReceived; n != 1000 {
				t.Errorf("server executed %d requests, want 1000", n)
			}
		})
	}
}

func TestMem(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 1, MTU: 1500})
	server, client := memPair(t, nw)
	defer server.Close()
	defer client.Close()
	go serveEcho(server, nil)
	for _, n := range echoSizes {
		if err := call(t, client, server.LocalAddr(), payload(9, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:40000"), &sock.Config{Transport: sock.UDP}); !errors.Is(err, sock.ErrBadAddress) {
		t.Errorf("server port 40000: %v", err)
	}
	if _, err := sock.Open(netip.AddrPort{}, nil); !errors.Is(err, sock.ErrBadAddress) {
		t.Errorf("zero address: %v", err)
	}
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:21200"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:21200"), &sock.Config{Transport: sock.UDP}); !errors.Is(err, sock.ErrPortInUse) {
		t.Errorf("second socket on a port in use: %v", err)
	}
	if _, err := s.Send(s.LocalAddr(), make([]byte, 1_000_001), 0); !errors.Is(err, sock.ErrMessageTooLong) {
		t.Errorf("oversize send: %v", err)
	}
	if err := s.Reply(&sock.Message{ID: 4}, []byte("x")); !errors.Is(err, sock.ErrUnknownRPC) {
		t.Errorf("reply to a response: %v", err)
	}
	// A client port receives responses only: a request there is refused
	// at once, not left to time out.
	clientPort := netip.MustParseAddrPort("127.0.0.1:40000")
	const want = "send to 127.0.0.1:40000: bad address: port 40000 is a client port; Homa servers listen on 1..32767"
	_, errSend := s.Send(clientPort, []byte("x"), 0)
	_, errOwned := s.SendOwned(clientPort, []byte("x"), 0)
	_, errCall := s.Call(context.Background(), clientPort, []byte("x"))
	for _, err := range []error{errSend, errOwned, errCall} {
		if !errors.Is(err, sock.ErrBadAddress) || err.Error() != want {
			t.Errorf("request to a client port: %v, want %q", err, want)
		}
	}
}

// TestOwned: requests and responses handed over with SendOwned and
// ReplyOwned arrive intact over a lossy network, where retransmissions
// come from the handed-over buffers too.
func TestOwned(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 2, MTU: 1500, Loss: 0.02})
	server, client := memPair(t, nw)
	defer server.Close()
	defer client.Close()
	go func() {
		for {
			m, err := server.Recv(context.Background(), sock.Any)
			if err != nil {
				return
			}
			_ = server.ReplyOwned(m, bytes.Clone(m.Data))
			m.Release()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, n := range echoSizes {
		want := payload(uint64(i), n)
		id, err := client.SendOwned(server.LocalAddr(), bytes.Clone(want), 7)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if m.Err != nil || m.Cookie != 7 || !bytes.Equal(m.Data, want) {
			t.Fatalf("%d bytes: err %v, cookie %d, echo equal %v", n, m.Err, m.Cookie, bytes.Equal(m.Data, want))
		}
		m.Release()
	}
	if _, err := client.SendOwned(server.LocalAddr(), nil, 0); err == nil {
		t.Error("SendOwned of an empty request succeeded")
	}
}

// memPair opens a server socket at 10.1.0.1:80 and a client socket at
// 10.1.0.2 on nw.
func memPair(t *testing.T, nw *memnet.Network) (server, client *sock.Socket) {
	t.Helper()
	cfg := &sock.Config{Network: nw}
	server, err := sock.Open(netip.MustParseAddrPort("10.1.0.1:80"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err = sock.Open(netip.MustParseAddrPort("10.1.0.2:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}
