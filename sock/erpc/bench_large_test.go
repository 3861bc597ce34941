package erpc_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/testkit/rpctcp"
	"github.com/homa-go/homa/sock/erpc"
)

// BenchmarkEchoLarge echoes messages beyond one Homa message (request and
// response each in fragments), one at a time over one session, with
// FragmentWindow 1 (a round trip per fragment) and 4 (the default), and
// reports the bytes carried each way per second (MB/s). The tcp case
// echoes the same bytes with net/rpc over a TCP loopback connection in
// the same run, for comparison:
//
//	go test -run '^$' -bench 'EchoLarge/(udp|tcp)/8MiB' -benchtime 20x -count 6 ./sock/erpc/
func BenchmarkEchoLarge(b *testing.B) {
	sizes := []int{2 << 20, 8 << 20}
	for _, tr := range benchTransports(b) {
		for _, size := range sizes {
			for _, w := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%dMiB/w%d", tr.name, size>>20, w), func(b *testing.B) {
					benchEchoLarge(b, tr, size, w)
				})
			}
		}
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("tcp/%dMiB", size>>20), func(b *testing.B) { benchEchoTCP(b, size) })
	}
}

func benchEchoLarge(b *testing.B, tr benchTransport, size, window int) {
	snx, srv, wg := benchEchoServer(b, tr, tr.base+60)
	ccfg := tr.config(b)
	ccfg.FragmentWindow = window
	cnx, err := erpc.NewNexus(netip.AddrPortFrom(tr.host, tr.base+70), ccfg)
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
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := rpc.Call(ctx, s, 1, req)
		cancel()
		if err != nil || len(resp) != size {
			b.Fatalf("%d bytes, %v", len(resp), err)
		}
	}
	call() // the first echo fills the Rpcs' pools: measure the next ones
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call()
	}
}

// Echo is the net/rpc service of the tcp case.
type Echo struct{}

// Echo answers with the request's bytes.
func (Echo) Echo(req []byte, resp *[]byte) error {
	*resp = req
	return nil
}

// benchEchoTCP echoes size bytes at a time with net/rpc (gob) over TCP
// loopback.
func benchEchoTCP(b *testing.B, size int) {
	c, stop, err := rpctcp.Start(Echo{})
	if err != nil {
		b.Skipf("net/rpc on TCP loopback: %v", err)
	}
	defer stop()
	req := bytes.Repeat([]byte{7}, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var resp []byte
		if err := c.Call("Echo.Echo", req, &resp); err != nil || len(resp) != size {
			b.Fatalf("%d bytes, %v", len(resp), err)
		}
	}
}
