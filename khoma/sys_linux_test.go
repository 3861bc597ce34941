//go:build linux

package khoma

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/contract"
)

// kernelHoma reports whether the running kernel can open Homa sockets,
// and if not, why.
func kernelHoma() (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, IPPROTO_HOMA)
	if err != nil {
		return false, err
	}
	unix.Close(fd)
	return true, nil
}

func TestOpenWithoutModule(t *testing.T) {
	if ok, _ := kernelHoma(); ok {
		t.Skip("the kernel has the Homa module")
	}
	_, err := Open(netip.MustParseAddrPort("127.0.0.1:0"), false)
	if !errors.Is(err, ErrNoKernelHoma) || !errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Errorf("Open = %v, want ErrNoKernelHoma wrapping EPROTONOSUPPORT", err)
	}
}

func TestOpenBadAddress(t *testing.T) {
	for _, a := range []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:32768")} {
		if _, err := Open(a, true); !errors.Is(err, contract.ErrBadAddress) {
			t.Errorf("Open(%v) = %v, want ErrBadAddress", a, err)
		}
	}
}

func TestSockaddr(t *testing.T) {
	for _, s := range []string{"10.1.2.3:80", "[fe80::1:2]:32768", "[::ffff:10.0.0.1]:7"} {
		ap := netip.MustParseAddrPort(s)
		raw, n := rawSockaddr(ap)
		want := uint32(unix.SizeofSockaddrInet6)
		if ap.Addr().Is4() {
			want = unix.SizeofSockaddrInet4
		}
		if n != want {
			t.Errorf("%s: sockaddr length %d, want %d", s, n, want)
		}
		if got := peerOf(&raw); got != ap {
			t.Errorf("%s: decoded as %v", s, got)
		}
	}
	raw, _ := rawSockaddr(netip.MustParseAddrPort("1.2.3.4:258"))
	b := (*[8]byte)(unsafe.Pointer(&raw))
	if *b != [8]byte{unix.AF_INET, 0, 1, 2, 1, 2, 3, 4} {
		t.Errorf("sockaddr_in bytes %v", *b)
	}
}

// openKernel opens a kernel socket or skips the test when the kernel has
// no Homa module.
func openKernel(t *testing.T, addr string, server bool) *Socket {
	t.Helper()
	s, err := Open(netip.MustParseAddrPort(addr), server)
	if errors.Is(err, ErrNoKernelHoma) {
		t.Skipf("kernel has no Homa module: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestKernelEcho runs against the kernel module: echo of every size from
// 1 byte to 1,000,000 over IPv4 and IPv6, concurrent RPCs, and Abort.
func TestKernelEcho(t *testing.T) {
	for i, host := range []string{"127.0.0.1", "[::1]"} {
		t.Run(host, func(t *testing.T) {
			server := openKernel(t, host+":"+[]string{"4101", "4102"}[i], true)
			client := openKernel(t, host+":0", false)
			if p := client.LocalAddr().Port(); p < HOMA_MIN_DEFAULT_PORT {
				t.Errorf("client port %d below %d", p, HOMA_MIN_DEFAULT_PORT)
			}
			var wg sync.WaitGroup
			wg.Go(func() { serveEcho(server) })
			defer func() {
				server.Close()
				wg.Wait()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dst := server.LocalAddr()
			for k, n := range sizes {
				if err := call(ctx, client, dst, payload(uint64(k), n)); err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
			}
			var cw sync.WaitGroup
			errs := make(chan error, 4)
			for w := range 4 {
				cw.Go(func() {
					for k := w; k < 100; k += 4 {
						if err := call(ctx, client, dst, payload(uint64(k), 1+k*997)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			cw.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestKernelAbort aborts an RPC whose server never answers.
func TestKernelAbort(t *testing.T) {
	silent := openKernel(t, "127.0.0.1:4103", true)
	client := openKernel(t, "127.0.0.1:0", false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := client.Send(silent.LocalAddr(), []byte("never answered"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := silent.Recv(ctx, 0); err != nil || string(m.Data) != "never answered" {
		t.Fatalf("server Recv = %v, %v", m, err)
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
	if m := <-res; m == nil || !errors.Is(m.Err, contract.ErrAborted) {
		t.Fatalf("Recv of the aborted RPC = %+v", m)
	}
	if _, err := client.Recv(ctx, id); !errors.Is(err, contract.ErrUnknownRPC) {
		t.Errorf("Recv after Abort = %v", err)
	}
	id2, _ := client.Send(silent.LocalAddr(), []byte("x"), 0)
	if err := client.Abort(id2); err != nil {
		t.Errorf("Abort without a waiter = %v", err)
	}
}
