package erpc_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// TestMsgBuffer: allocation, resizing within the maximum, reuse from the
// pool, and the panics that catch misuse.
func TestMsgBuffer(t *testing.T) {
	nw := memnet.New(memnet.Config{})
	defer nw.Close()
	nx, err := erpc.NewNexus(netip.AddrPortFrom(serverHost, nexusPort), memConfig(nw))
	if err != nil {
		t.Fatal(err)
	}
	defer nx.Close()
	r, err := nx.NewRpc(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	m, err := r.AllocMsgBuffer(100)
	if err != nil || m.Len() != 100 || m.MaxLen() != 100 || len(m.Data()) != 100 {
		t.Fatalf("AllocMsgBuffer(100): %v, len %d max %d", err, m.Len(), m.MaxLen())
	}
	copy(m.Data(), "hello")
	if err := r.ResizeMsgBuffer(m, 5); err != nil || string(m.Data()) != "hello" {
		t.Fatalf("resize down: %v %q", err, m.Data())
	}
	if err := r.ResizeMsgBuffer(m, 101); !errors.Is(err, erpc.ErrMessageTooLarge) {
		t.Fatalf("resize past the maximum: %v", err)
	}
	r.FreeMsgBuffer(m)
	if again, _ := r.AllocMsgBuffer(90); again != m {
		t.Fatal("a freed buffer of the same class was not reused")
	} else {
		r.FreeMsgBuffer(again)
	}
	if _, err := r.AllocMsgBuffer(-1); err == nil {
		t.Fatal("negative size accepted")
	}
	big, err := r.AllocMsgBuffer(erpc.MaxMsgSize)
	if err != nil || big.Len() != erpc.MaxMsgSize {
		t.Fatalf("largest buffer: %v", err)
	}
	r.FreeMsgBuffer(big)

	mustPanic(t, "double free", func() { r.FreeMsgBuffer(big) })
	h := &erpc.ReqHandle{}
	mustPanic(t, "free of a PreResp", func() { r.FreeMsgBuffer(h.PreResp()) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}

// TestBuffersHeldByRequest: the layer refuses buffers a pending request
// holds, and freeing one panics; the continuation hands them back.
func TestBuffersHeldByRequest(t *testing.T) {
	nw := memnet.New(memnet.Config{})
	defer nw.Close()
	cli := newClient(t, memConfig(nw), clientHost)
	defer cli.close()
	s, err := cli.rpc.CreateSession(netip.AddrPortFrom(nobody, nexusPort), 0)
	if err != nil {
		t.Fatal(err)
	}
	req, resp := mustBuf(t, cli.rpc, 10), mustBuf(t, cli.rpc, 10)
	var got error
	done := false
	if err := cli.rpc.EnqueueRequest(s, 1, req, resp, func(_ *erpc.MsgBuffer, _ any, err error) { got, done = err, true }, nil); err != nil {
		t.Fatal(err)
	}
	if err := cli.rpc.EnqueueRequest(s, 1, req, mustBuf(t, cli.rpc, 1), func(*erpc.MsgBuffer, any, error) {}, nil); !errors.Is(err, erpc.ErrBufferInUse) {
		t.Fatalf("request buffer used twice: %v", err)
	}
	if err := cli.rpc.ResizeMsgBuffer(req, 1); !errors.Is(err, erpc.ErrBufferInUse) {
		t.Fatalf("resize of a held buffer: %v", err)
	}
	mustPanic(t, "free of a held buffer", func() { cli.rpc.FreeMsgBuffer(resp) })
	if err := cli.rpc.DestroySession(s); !errors.Is(err, erpc.ErrSessionBusy) {
		t.Fatalf("destroy with a request queued: %v", err)
	}
	cli.rpc.Close()
	if !done || !errors.Is(got, erpc.ErrClosed) {
		t.Fatalf("continuation at close: %v %v", done, got)
	}
	cli.rpc.FreeMsgBuffer(req)
	cli.rpc.FreeMsgBuffer(resp)
}

// TestNoGoroutineLeak: over real UDP sockets on loopback, with sessions,
// dispatch and background handlers, every goroutine the layer and its
// sockets started is gone once Rpcs and Nexuses are closed.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		cfg := &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}, BackgroundThreads: 3}
		srvNx, err := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:29410"), cfg)
		if errors.Is(err, sock.ErrPortInUse) {
			t.Skipf("loopback port taken: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer srvNx.Close()
		_ = srvNx.Register(1, echo, erpc.Dispatch)
		_ = srvNx.Register(2, echo, erpc.Background)
		srv, err := srvNx.NewRpc(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(ctx) }()
		defer func() { cancel(); wg.Wait(); srv.Close() }()

		cliNx, err := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:29430"), &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}})
		if err != nil {
			t.Fatal(err)
		}
		defer cliNx.Close()
		cli, err := cliNx.NewRpc(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		s, err := cli.CreateSession(srvNx.Addr(), 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel2()
		for i := range 20 {
			var opts []erpc.ReqOption
			if i%2 == 1 {
				opts = append(opts, erpc.ExactlyOnce)
			}
			resp, err := cli.Call(ctx2, s, uint8(1+i%2), []byte("leak?"), opts...)
			if err != nil || string(resp) != "leak?" {
				t.Fatalf("call %d: %q %v", i, resp, err)
			}
		}
		if err := cli.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		_ = cli.RunEventLoop(50 * time.Millisecond)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
