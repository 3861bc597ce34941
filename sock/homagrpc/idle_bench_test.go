package homagrpc

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// BenchmarkIdleStreams: what open, idle streams cost over UDP loopback
// each second, with one ClientConn's streams pulled through its pull set
// (pullset) and, for comparison, each with a pull of its own (alone, as
// with a server of the version before pull sets). Each stream is opened
// with one echo; then each iteration idles a second. The metrics are per
// second: the client's RPCs, the packets each socket sends, and the
// replies the server holds at the end.
//
//	go test -run '^$' -bench IdleStreams -benchtime 10x ./sock/homagrpc
func BenchmarkIdleStreams(b *testing.B) {
	for _, c := range []struct {
		name    string
		streams int
		alone   bool
	}{{"pullset/100", 100, false}, {"pullset/2500", 2500, false}, {"alone/100", 100, true}} {
		b.Run(c.name, func(b *testing.B) { idleStreams(b, c.streams, c.alone) })
	}
}

func idleStreams(b *testing.B, n int, alone bool) {
	cfg := &sock.Config{Transport: sock.UDP}
	ss := socktest.OpenServer(b, "127.0.0.1", 21400, cfg)
	srv := NewServer()
	testpb.RegisterTestServiceServer(srv, &echoService{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ss) })
	defer func() { srv.Stop(); wg.Wait() }()
	cs, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	cc := NewClientConn(cs, ss.LocalAddr())
	defer cc.Close()
	cc.pullsTo(ss.LocalAddr()).alone = alone
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	sts := make([]grpc.ClientStream, n)
	for i := range sts {
		if sts[i], err = cc.NewStream(context.Background(), desc, testpb.TestService_FullDuplexCall_FullMethodName); err != nil {
			b.Fatal(err)
		}
		send(b, sts, i, 0)
		recvEcho(b, sts, i, 0)
	}
	time.Sleep(2 * time.Second) // past the opening's acknowledgments and first keepalives
	c0, s0 := cs.Stats(), ss.Stats()
	start := time.Now()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	secs := time.Since(start).Seconds()
	c1, s1 := cs.Stats(), ss.Stats()
	sent := func(s sock.Stats) (n uint64) {
		for _, v := range s.TxPackets {
			n += v
		}
		return n
	}
	b.ReportMetric(float64(c1.RPCsStarted-c0.RPCsStarted)/secs, "client-RPCs/s")
	b.ReportMetric(float64(sent(c1)-sent(c0))/secs, "client-pkts/s")
	b.ReportMetric(float64(sent(s1)-sent(s0))/secs, "server-pkts/s")
	b.ReportMetric(float64(s1.PendingReplies), "held-replies")
	b.ReportMetric(0, "ns/op")
	closeStreams(b, sts)
}
