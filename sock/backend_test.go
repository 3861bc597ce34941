package sock_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock"
)

func TestBackendString(t *testing.T) {
	for b, want := range map[sock.Backend]string{sock.Engine: "engine", sock.Kernel: "kernel", sock.Auto: "auto", 7: "Backend(7)"} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(b), got, want)
		}
	}
}

// kernelModule reports whether the kernel backend can open a socket
// here, and the error when it cannot.
func kernelModule(t *testing.T) (bool, error) {
	t.Helper()
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Backend: sock.Kernel})
	if err != nil {
		return false, err
	}
	s.Close()
	return true, nil
}

func TestKernelBackendWithoutModule(t *testing.T) {
	ok, err := kernelModule(t)
	if ok {
		t.Skip("the kernel has the Homa module")
	}
	if !errors.Is(err, sock.ErrNoKernelHoma) {
		t.Fatalf("Open(Kernel) = %v, want ErrNoKernelHoma", err)
	}
}

func TestDefaultBackendIsEngine(t *testing.T) {
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend() != sock.Engine {
		t.Errorf("Backend() = %v", s.Backend())
	}
	// An in-memory network has no kernel module: its sockets are the
	// engine's whatever Backend says.
	nw := memnet.New(memnet.Config{Seed: 1})
	m, err := sock.Open(netip.MustParseAddrPort("10.0.0.1:0"), &sock.Config{Backend: sock.Kernel, Network: nw})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Backend() != sock.Engine {
		t.Errorf("Backend() on an in-memory network = %v", m.Backend())
	}
}

func TestUnknownBackend(t *testing.T) {
	if _, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Backend: 9}); err == nil {
		t.Error("Open with an unknown backend succeeded")
	}
}

// TestAutoFallsBack: without the kernel module, Auto runs the engine,
// over raw IP and over UDP, and the socket works.
func TestAutoFallsBack(t *testing.T) {
	if ok, _ := kernelModule(t); ok {
		t.Skip("the kernel has the Homa module")
	}
	for i, tr := range []sock.Transport{sock.Raw, sock.UDP} {
		t.Run(tr.String(), func(t *testing.T) {
			cfg := &sock.Config{Backend: sock.Auto, Transport: tr}
			server, err := sock.Open(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(21500+i)), cfg)
			if errors.Is(err, sock.ErrPermission) {
				t.Skipf("skipping %v transport: %v", tr, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if server.Backend() != sock.Engine || client.Backend() != sock.Engine {
				t.Errorf("Auto gave %v and %v, want the engine", server.Backend(), client.Backend())
			}
			go serveEcho(server, nil)
			if err := call(t, client, server.LocalAddr(), payload(3, 5000)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// openKernelPair opens an echo server and a client on the kernel
// backend, or skips the test when the kernel has no Homa module.
func openKernelPair(t *testing.T, host string, port uint16, backend sock.Backend) (server, client *sock.Socket) {
	t.Helper()
	cfg := &sock.Config{Backend: backend}
	addr := netip.MustParseAddr(host)
	server, err := sock.Open(netip.AddrPortFrom(addr, port), cfg)
	if errors.Is(err, sock.ErrNoKernelHoma) {
		t.Skipf("kernel has no Homa module: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	client, err = sock.Open(netip.AddrPortFrom(addr, 0), cfg)
	if err != nil {
		server.Close()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { serveEcho(server, nil) })
	t.Cleanup(func() {
		client.Close()
		server.Close()
		wg.Wait()
	})
	return server, client
}

// TestKernelEcho runs the echo of every size over the kernel module, on
// IPv4 and IPv6, with both Kernel and Auto.
func TestKernelEcho(t *testing.T) {
	for i, c := range []struct {
		host    string
		backend sock.Backend
	}{{"127.0.0.1", sock.Kernel}, {"::1", sock.Kernel}, {"127.0.0.1", sock.Auto}} {
		t.Run(c.host+"/"+c.backend.String(), func(t *testing.T) {
			if ok, err := kernelModule(t); !ok {
				t.Skipf("kernel has no Homa module: %v", err)
			}
			server, client := openKernelPair(t, c.host, uint16(21510+i), c.backend)
			if server.Backend() != sock.Kernel || client.Backend() != sock.Kernel {
				t.Errorf("backends %v and %v, want kernel", server.Backend(), client.Backend())
			}
			for _, n := range echoSizes {
				if err := call(t, client, server.LocalAddr(), payload(uint64(i), n)); err != nil {
					t.Fatal(err)
				}
			}
			if st := client.Stats(); st.RPCsCompleted != uint64(len(echoSizes)) {
				t.Errorf("client completed %d RPCs, want %d", st.RPCsCompleted, len(echoSizes))
			}
			if st := server.Stats(); st.RequestsReceived != uint64(len(echoSizes)) {
				t.Errorf("server received %d requests, want %d", st.RequestsReceived, len(echoSizes))
			}
		})
	}
}

// TestKernelAbort: an RPC to a server that never answers, aborted while
// a goroutine waits for it, and a Call whose context ends.
func TestKernelAbort(t *testing.T) {
	cfg := &sock.Config{Backend: sock.Kernel}
	silent, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:21520"), cfg)
	if errors.Is(err, sock.ErrNoKernelHoma) {
		t.Skipf("kernel has no Homa module: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	id, err := client.Send(silent.LocalAddr(), []byte("hello"), 1)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan *sock.Message, 1)
	go func() {
		m, _ := client.Recv(context.Background(), id)
		res <- m
	}()
	time.Sleep(10 * time.Millisecond) // let the Recv start waiting (either order is correct)
	if err := client.Abort(id); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-res:
		if m != nil && !errors.Is(m.Err, sock.ErrAborted) {
			t.Errorf("aborted RPC returned %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recv of an aborted RPC did not return")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := client.Call(ctx, silent.LocalAddr(), []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call to a silent server = %v", err)
	}
}
