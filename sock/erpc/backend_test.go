package erpc_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// TestBackends: the layer works over every way sock opens a socket on
// loopback: the engine over raw IP (root) and over UDP, and the Linux
// kernel module (when the kernel has it). It uses only sock's public
// API, so nothing else differs.
func TestBackends(t *testing.T) {
	for i, tc := range []struct {
		name string
		cfg  sock.Config
	}{
		{"engine-raw", sock.Config{Transport: sock.Raw}},
		{"engine-udp", sock.Config{Transport: sock.UDP}},
		{"kernel", sock.Config{Backend: sock.Kernel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := uint16(29600 + 40*i)
			cfg := &erpc.Config{Socket: &tc.cfg}
			srvNx, err := erpc.NewNexus(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), base), cfg)
			switch {
			case errors.Is(err, sock.ErrPermission):
				t.Skipf("raw sockets need CAP_NET_RAW: %v", err)
			case errors.Is(err, sock.ErrNoKernelHoma):
				t.Skipf("the kernel has no Homa module: %v", err)
			case errors.Is(err, sock.ErrPortInUse):
				t.Skipf("port taken: %v", err)
			case err != nil:
				t.Fatal(err)
			}
			defer srvNx.Close()
			_ = srvNx.Register(1, echo, erpc.Dispatch)
			srv, err := srvNx.NewRpc(0, nil)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); _ = srv.Serve(context.Background()) }()
			defer func() { srvNx.Close(); wg.Wait(); srv.Close() }()

			cliNx, err := erpc.NewNexus(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), base+20), cfg)
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
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, opts := range [][]erpc.ReqOption{nil, {erpc.ExactlyOnce}} {
				resp, err := cli.Call(ctx, s, 1, []byte(tc.name), opts...)
				if err != nil || string(resp) != tc.name {
					t.Fatalf("call %v: %q %v", opts, resp, err)
				}
			}
			if _, err := cli.Call(ctx, s, 2, []byte("?")); !errors.Is(err, erpc.ErrNoSuchService) {
				t.Fatalf("unknown type: %v", err)
			}
		})
	}
}
