package erpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// BenchmarkEchoLarge echoes messages beyond one Homa message (request and
// response each in fragments), one at a time over one session, and
// reports the bytes carried each way per second (MB/s):
//
//	go test -run '^$' -bench EchoLarge ./sock/erpc/
func BenchmarkEchoLarge(b *testing.B) {
	for _, tr := range benchTransports(b) {
		for _, size := range []int{2 << 20, 8 << 20} {
			b.Run(fmt.Sprintf("%s/%dMiB", tr.name, size>>20), func(b *testing.B) {
				snx, err := erpc.NewNexus(netip.AddrPortFrom(tr.host, tr.base+60), tr.config(b))
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
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); _ = srv.Serve(context.Background()) }()
				cnx, err := erpc.NewNexus(netip.AddrPortFrom(tr.host, tr.base+70), tr.config(b))
				if err != nil {
					b.Fatal(err)
				}
				rpc, err := cnx.NewRpc(0, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { rpc.Close(); cnx.Close(); snx.Close(); wg.Wait(); srv.Close() }()
				s, err := rpc.CreateSession(snx.Addr(), 0)
				if err != nil {
					b.Fatal(err)
				}
				req := bytes.Repeat([]byte{7}, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					resp, err := rpc.Call(ctx, s, 1, req)
					cancel()
					if err != nil || len(resp) != size {
						b.Fatalf("%d bytes, %v", len(resp), err)
					}
				}
			})
		}
	}
}
