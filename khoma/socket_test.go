package khoma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
)

// Sizes around the bpage boundaries, up to the largest message.
var sizes = []int{1, 100, HOMA_BPAGE_SIZE - 1, HOMA_BPAGE_SIZE, HOMA_BPAGE_SIZE + 1, 200_000, HOMA_MAX_MESSAGE_LENGTH}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// serveEcho answers every request with its own bytes until s closes.
func serveEcho(s *Socket) {
	for {
		m, err := s.Recv(context.Background(), 0)
		if err != nil {
			return
		}
		_ = s.Reply(m.Peer, m.ID, m.Data)
	}
}

// echoPair opens a server socket on port 80 serving echo and a client
// socket. At cleanup it closes both and checks the bpage accounting.
func echoPair(t *testing.T) (h *fakeHost, server, client *Socket, cc *fakeConn) {
	t.Helper()
	h = newFakeHost()
	server, sc := h.socket(80)
	client, cc = h.socket(0)
	var wg sync.WaitGroup
	wg.Go(func() { serveEcho(server) })
	t.Cleanup(func() {
		client.Close()
		server.Close()
		wg.Wait()
		checkPages(t, h, server, sc)
		checkPages(t, h, client, cc)
	})
	return h, server, client, cc
}

// checkPages checks, once s is closed, that the kernel's and the
// socket's views of the bpages agree: every page handed out was returned
// once or is still queued for return, none is held.
func checkPages(t *testing.T, h *fakeHost, s *Socket, c *fakeConn) {
	t.Helper()
	for _, e := range h.errors() {
		t.Error(e)
	}
	if n := s.pages.Held(); n != 0 {
		t.Errorf("port %d: application still holds %d bpages", c.addr.Port(), n)
	}
	if out, q := c.outstanding(), s.pages.Queued(); out != q {
		t.Errorf("port %d: kernel misses %d bpages, socket queues %d", c.addr.Port(), out, q)
	}
}

func call(ctx context.Context, c *Socket, dst netip.AddrPort, req []byte) error {
	id, err := c.Send(dst, req, 7)
	if err != nil {
		return err
	}
	m, err := c.Recv(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case m.Err != nil:
		return m.Err
	case m.ID != id || m.Cookie != 7:
		return fmt.Errorf("response id %d cookie %d, want %d and 7", m.ID, m.Cookie, id)
	case !bytes.Equal(m.Data, req):
		return fmt.Errorf("echo of %d bytes differs (got %d bytes)", len(req), len(m.Data))
	}
	return nil
}

func TestEchoSizes(t *testing.T) {
	_, server, client, _ := echoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, n := range sizes {
		if err := call(ctx, client, server.LocalAddr(), payload(uint64(i), n)); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	st := client.Stats()
	if st.RPCsStarted != uint64(len(sizes)) || st.RPCsCompleted != uint64(len(sizes)) || st.ClientRPCs != 0 {
		t.Errorf("client stats %+v", st)
	}
	if st := server.Stats(); st.RequestsReceived != uint64(len(sizes)) || st.ServerRPCs != 0 {
		t.Errorf("server stats: %d requests, %d serving", st.RequestsReceived, st.ServerRPCs)
	}
}

// TestConcurrent runs RPCs from 8 goroutines, and makes every fifth
// recvmsg fail before the kernel takes the returned bpages.
func TestConcurrent(t *testing.T) {
	h, server, client, cc := echoPair(t)
	h.mu.Lock()
	cc.failEvery = 5
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for k := w; k < 200; k += 8 {
				n := []int{1, 1000, HOMA_BPAGE_SIZE, 150_000}[k%4]
				if err := call(ctx, client, server.LocalAddr(), payload(uint64(k), n)); err != nil {
					errs <- fmt.Errorf("rpc %d: %w", k, err)
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
	if n := client.Stats().ReadErrors; n == 0 {
		t.Error("no recvmsg failed: the fault injection did not run")
	}
}

// TestRecvByID: responses go to the goroutine waiting for their RPC,
// whatever order they arrive in; the rest wait for Recv(Any).
func TestRecvByID(t *testing.T) {
	h := newFakeHost()
	server, _ := h.socket(80)
	client, _ := h.socket(0)
	defer server.Close()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var ids []uint64
	for i := range 3 {
		id, err := client.Send(server.LocalAddr(), []byte{byte(i)}, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var reqs []*contract.Message
	for range 3 {
		m, err := server.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !m.IsRequest() {
			t.Fatalf("server got response %d", m.ID)
		}
		reqs = append(reqs, m)
	}
	for i := len(reqs) - 1; i >= 0; i-- { // answer the last first
		if err := server.Reply(reqs[i].Peer, reqs[i].ID, reqs[i].Data); err != nil {
			t.Fatal(err)
		}
	}
	m, err := client.Recv(ctx, ids[1])
	if err != nil || m.ID != ids[1] || m.Cookie != 1 || m.Data[0] != 1 {
		t.Fatalf("Recv(%d) = %+v, %v", ids[1], m, err)
	}
	got := map[uint64]bool{}
	for range 2 {
		m, err := client.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		got[m.ID] = true
	}
	if !got[ids[0]] || !got[ids[2]] {
		t.Errorf("Recv(Any) returned %v, want %d and %d", got, ids[0], ids[2])
	}
	if _, err := client.Recv(ctx, ids[0]); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Recv of a taken response: %v", err)
	}
}

// TestResponseBeforeSendRecords covers the reader receiving a response
// before Send has recorded its id.
func TestResponseBeforeSendRecords(t *testing.T) {
	h := newFakeHost()
	s, _ := h.socket(0)
	defer s.Close()
	ctx := context.Background()
	peer := netip.MustParseAddrPort("127.0.0.1:80")

	s.dispatch(&contract.Message{ID: 10, Peer: peer, Data: []byte("a")})
	s.started(10, peer, 0)
	if m, err := s.Recv(ctx, 10); err != nil || string(m.Data) != "a" {
		t.Fatalf("Recv(10) = %v, %v", m, err)
	}

	s.dispatch(&contract.Message{ID: 12, Peer: peer, Data: []byte("b")})
	if m, err := s.Recv(ctx, 0); err != nil || m.ID != 12 {
		t.Fatalf("Recv(Any) = %v, %v", m, err)
	}
	s.started(12, peer, 0)
	if _, err := s.Recv(ctx, 12); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Recv(12) after Recv(Any) took it: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) != 0 || len(s.completed) != 0 || s.mb.Expected() != 0 {
		t.Errorf("left %d pending, %d completed, %d expected", len(s.pending), len(s.completed), s.mb.Expected())
	}
}

func TestAbort(t *testing.T) {
	h := newFakeHost()
	server, _ := h.socket(80)
	client, _ := h.socket(0)
	defer server.Close()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A waiter gets ErrAborted.
	id, err := client.Send(server.LocalAddr(), []byte("x"), 3)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan *contract.Message, 1)
	go func() {
		m, _ := client.Recv(ctx, id)
		res <- m
	}()
	waitFor(t, func() bool { return waiting(client) == 1 })
	if err := client.Abort(id); err != nil {
		t.Fatal(err)
	}
	if m := <-res; m == nil || !errors.Is(m.Err, contract.ErrAborted) || m.ID != id || m.Cookie != 3 {
		t.Fatalf("waiter got %+v", m)
	}

	// Without a waiter the RPC is forgotten, and a late answer dropped.
	id2, _ := client.Send(server.LocalAddr(), []byte("y"), 0)
	if err := client.Abort(id2); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Recv(ctx, id2); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Recv after Abort: %v", err)
	}
	for range 2 {
		m, err := server.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Reply(m.Peer, m.ID, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if m, err := client.Recv(short, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the answer to an aborted RPC came out: %+v, %v", m, err)
	}
	if err := client.Abort(12345); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Abort(unknown) = %v", err)
	}
}

// TestAbortRace: the kernel has already handed the response to the
// reader when Abort runs, so it refuses the abort; the reader drops it.
func TestAbortRace(t *testing.T) {
	h := newFakeHost()
	s, _ := h.socket(0)
	defer s.Close()
	peer := netip.MustParseAddrPort("127.0.0.1:80")
	s.started(20, peer, 0)
	if err := s.Abort(20); err != nil { // the fake kernel knows no RPC 20
		t.Fatal(err)
	}
	s.dispatch(&contract.Message{ID: 20, Peer: peer, Data: []byte("late")})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mb.Ready() != 0 || len(s.aborted) != 0 || len(s.pending) != 0 {
		t.Errorf("after a late response: %d ready, %d aborted, %d pending", s.mb.Ready(), len(s.aborted), len(s.pending))
	}
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 10_000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached in 10 s")
}

func waiting(s *Socket) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mb.Waiting()
}

func TestRecvContext(t *testing.T) {
	h := newFakeHost()
	s, _ := h.socket(80)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Recv(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recv = %v, want DeadlineExceeded", err)
	}
	if n := waiting(s); n != 0 {
		t.Errorf("%d waiters left", n)
	}
	if _, err := s.Recv(context.Background(), 8); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Recv(unknown id) = %v", err)
	}
}

func TestCloseWakesWaiters(t *testing.T) {
	h := newFakeHost()
	s, _ := h.socket(80)
	s.started(40, netip.MustParseAddrPort("127.0.0.1:81"), 0)
	errs := make(chan error, 2)
	for _, id := range []uint64{0, 40} {
		go func() {
			_, err := s.Recv(context.Background(), id)
			errs <- err
		}()
	}
	waitFor(t, func() bool { return waiting(s) == 2 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, contract.ErrClosed) {
			t.Errorf("Recv = %v, want ErrClosed", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := s.Send(netip.MustParseAddrPort("127.0.0.1:81"), []byte("x"), 0); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("Send after Close = %v", err)
	}
	if err := s.Abort(40); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("Abort after Close = %v", err)
	}
	if _, err := s.Recv(context.Background(), 0); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("Recv after Close = %v", err)
	}
}

func TestArgumentErrors(t *testing.T) {
	h := newFakeHost()
	s, _ := h.socket(80)
	defer s.Close()
	dst := netip.MustParseAddrPort("127.0.0.1:81")
	for _, n := range []int{0, HOMA_MAX_MESSAGE_LENGTH + 1} {
		if _, err := s.Send(dst, make([]byte, n), 0); !errors.Is(err, contract.ErrMessageTooLong) {
			t.Errorf("Send(%d bytes) = %v", n, err)
		}
	}
	for _, bad := range []string{"[::1]:81", "127.0.0.1:0"} {
		if _, err := s.Send(netip.MustParseAddrPort(bad), []byte("x"), 0); !errors.Is(err, contract.ErrBadAddress) {
			t.Errorf("Send to %s = %v", bad, err)
		}
	}
	if err := s.Reply(dst, 5, []byte("x")); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Reply(unknown) = %v", err)
	}
	s.dispatch(&contract.Message{ID: 5, Peer: dst, Data: []byte("q")})
	if err := s.Reply(dst, 5, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Reply(dst, 5, []byte("x")); !errors.Is(err, contract.ErrAlreadyReplied) {
		t.Errorf("second Reply = %v", err)
	}
}

// TestPeerFailure: requests that the module fails end with the contract's
// error that its errno means, in a *contract.OpError naming the RPC,
// and the errno survives the mapping.
func TestPeerFailure(t *testing.T) {
	h := newFakeHost()
	unreachable := netip.MustParseAddrPort("10.0.0.2:80")
	noHoma := netip.MustParseAddrPort("10.0.0.3:80")
	silent := netip.MustParseAddrPort("10.0.0.4:80")
	noRoute := netip.MustParseAddr("10.0.0.5")
	h.fail = map[netip.AddrPort]syscall.Errno{
		unreachable: syscall.EHOSTUNREACH,
		noHoma:      syscall.EPROTONOSUPPORT,
		silent:      syscall.ETIMEDOUT,
	}
	h.noRoute = map[netip.Addr]syscall.Errno{noRoute: syscall.ENETUNREACH}
	s, _ := h.socket(0)
	defer s.Close()
	for _, tc := range []struct {
		name    string
		dst     netip.AddrPort
		want    error
		errno   syscall.Errno
		timeout bool
		op      string // "" when Send fails
	}{
		{"closed port", netip.MustParseAddrPort("127.0.0.1:99"), contract.ErrNoListener, syscall.ENOTCONN, false, "recv"},
		{"host without Homa", noHoma, contract.ErrNoListener, syscall.EPROTONOSUPPORT, false, "recv"},
		{"unreachable host", unreachable, contract.ErrHostUnreachable, syscall.EHOSTUNREACH, false, "recv"},
		{"silent peer", silent, contract.ErrPeerTimeout, syscall.ETIMEDOUT, true, "recv"},
		{"no route", netip.AddrPortFrom(noRoute, 80), contract.ErrHostUnreachable, syscall.ENETUNREACH, false, ""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := call(ctx, s, tc.dst, []byte("x"))
		cancel()
		var errno syscall.Errno
		if !errors.Is(err, tc.want) || !errors.As(err, &errno) || errno != tc.errno {
			t.Errorf("%s: %v, want %v with %v", tc.name, err, tc.want, tc.errno)
		}
		for _, other := range []error{contract.ErrNoListener, contract.ErrHostUnreachable, contract.ErrPeerTimeout} {
			if other != tc.want && errors.Is(err, other) {
				t.Errorf("%s: %v matches %v too", tc.name, err, other)
			}
		}
		if tc.op == "" {
			continue
		}
		var op *contract.OpError
		if !errors.As(err, &op) || op.Op != tc.op || op.ID == 0 || op.Peer != tc.dst || op.Timeout() != tc.timeout {
			t.Errorf("%s: %#v, want an OpError %q of the RPC with %v, Timeout %v", tc.name, op, tc.op, tc.dst, tc.timeout)
		}
	}
}

// TestReadOnlyOnDemand: with nobody in Recv, messages stay in the
// kernel.
func TestReadOnlyOnDemand(t *testing.T) {
	h := newFakeHost()
	server, sc := h.socket(80)
	client, _ := h.socket(0)
	defer server.Close()
	defer client.Close()
	for range 5 {
		if _, err := client.Send(server.LocalAddr(), []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := sc.queued(); n != 5 {
		t.Errorf("kernel holds %d requests, want 5", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := server.Recv(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

func TestMessageOutcomes(t *testing.T) {
	h := newFakeHost()
	c := h.open(80, 4)
	s := &Socket{c: c}
	peer := netip.MustParseAddrPort("127.0.0.1:81")
	copy(c.buf[HOMA_BPAGE_SIZE:], "hello")

	s.rargs = RecvmsgArgs{ID: 4, CompletionCookie: 9, NumBpages: 1}
	s.rargs.BpageOffsets[0] = HOMA_BPAGE_SIZE
	m, ok := s.message(5, peer, nil)
	if !ok || m == nil || string(m.Data) != "hello" || m.ID != 4 || m.Cookie != 9 || m.Peer != peer {
		t.Errorf("message = %+v, %v", m, ok)
	}
	if s.pages.Held() != 0 || s.pages.Queued() != 1 {
		t.Errorf("after a message: %d held, %d queued", s.pages.Held(), s.pages.Queued())
	}

	s.rargs = RecvmsgArgs{ID: 6, NumBpages: 1}
	s.rargs.BpageOffsets[0] = 4 * HOMA_BPAGE_SIZE // beyond the region
	if m, ok := s.message(5, peer, nil); !ok || m == nil || !errors.Is(m.Err, ErrBadBpages) {
		t.Errorf("response in bad bpages = %+v, %v", m, ok)
	}
	s.rargs = RecvmsgArgs{ID: 7}
	if m, ok := s.message(-1, peer, syscall.ENOMEM); !ok || m != nil {
		t.Errorf("failed request = %+v, %v", m, ok)
	}
	s.rargs = RecvmsgArgs{}
	if m, ok := s.message(-1, peer, syscall.ENOMEM); ok || m != nil {
		t.Errorf("socket error = %+v, %v", m, ok)
	}
	s.rargs = RecvmsgArgs{ID: 8}
	if m, ok := s.message(-1, peer, syscall.ECANCELED); !ok || !errors.Is(m.Err, contract.ErrAborted) {
		t.Errorf("aborted RPC = %+v, %v", m, ok)
	}
}
