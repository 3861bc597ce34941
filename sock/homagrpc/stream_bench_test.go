package homagrpc_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/homagrpc"
)

// FullDuplexCall echoes each message's payload.
func (benchService) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	resp := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{}}
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp.Payload.Body = req.GetPayload().GetBody()
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// streamMsgSize is the payload of the streaming benchmark's messages.
const streamMsgSize = 1024

// startBenchHoma serves benchService over Homa on loopback (a free port
// from base up, socket configuration cfg) and returns a client of it,
// the client's socket and the function that stops both.
func startBenchHoma(b *testing.B, cfg *sock.Config, base uint16) (testpb.TestServiceClient, *sock.Socket, func(), error) {
	b.Helper()
	s, err := socktest.OpenFree("127.0.0.1", base, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	srv := homagrpc.NewServer()
	testpb.RegisterTestServiceServer(srv, benchService{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(s) })
	cs, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), cfg)
	if err != nil {
		srv.Stop()
		wg.Wait()
		b.Fatal(err)
	}
	cc := homagrpc.NewClientConn(cs, s.LocalAddr())
	return testpb.NewTestServiceClient(cc), cs, func() { cc.Close(); cs.Close(); srv.Stop(); wg.Wait() }, nil
}

// BenchmarkStreamBidi measures bidirectional streaming of 1 KB messages,
// each echoed by the server (grpc.testing.TestService FullDuplexCall,
// through the generated stubs), over Homa (the transports of
// socktest.BenchConfigs that the process may open) and over grpc-go on
// a TCP loopback connection, in one run, b.N messages per transport and
// mode, in rounds over the transports in turn (so that all meet the same
// load from the rest of the machine): "window", a sender and a receiver goroutine on one stream with
// as many messages in flight as flow control lets go, and "pingpong",
// one message in flight. It reports each one's messages per second and,
// as speedup-*, how many times grpc-go/TCP's rate each rate over Homa
// is.
//
//	go test -run '^$' -bench StreamBidi -benchtime 20000x ./sock/homagrpc
func BenchmarkStreamBidi(b *testing.B) {
	type proto struct {
		name string
		c    testpb.TestServiceClient
		s    *sock.Socket // the client's, over Homa
	}
	var protos []proto
	for _, tc := range socktest.BenchConfigs {
		c, cs, stop, err := startBenchHoma(b, &tc.Cfg, 27720)
		if err != nil {
			b.Logf("leaving out %s: %v", tc.Name, err)
			continue
		}
		defer stop()
		protos = append(protos, proto{tc.Name, c, cs})
	}
	c, stop := startGRPC(b)
	defer stop()
	protos = append(protos, proto{"grpc-tcp", c, nil})

	const rounds = 10
	metrics := map[string]float64{}
	b.ResetTimer()
	for _, mode := range []string{"window", "pingpong"} {
		elapsed := make([]time.Duration, len(protos))
		rpcs := make([]uint64, len(protos))
		run := func(i, n int) {
			p := protos[i]
			var before uint64
			if p.s != nil {
				before = p.s.Stats().RPCsStarted
			}
			d, err := streamEcho(p.c, n, mode == "window")
			if err != nil {
				b.Fatalf("%s %s: %v", p.name, mode, err)
			}
			elapsed[i] += d
			if p.s != nil {
				rpcs[i] += p.s.Stats().RPCsStarted - before
			}
		}
		for i := range protos {
			run(i, 500) // warm up: connections, pools, caches
			elapsed[i], rpcs[i] = 0, 0
		}
		// Rounds over every transport in turn, so that all of them meet
		// the same load from the rest of the machine.
		for r := range rounds {
			for i := range protos {
				run(i, b.N*(r+1)/rounds-b.N*r/rounds)
			}
		}
		rate := func(i int) float64 { return float64(b.N) / elapsed[i].Seconds() }
		tcp := rate(len(protos) - 1)
		for i, p := range protos {
			metrics[p.name+"-"+mode+"-msg/s"] = rate(i)
			if p.s != nil {
				// Homa RPCs (frames of either kind) per message.
				metrics[p.name+"-"+mode+"-rpc/msg"] = float64(rpcs[i]) / float64(b.N)
				metrics["speedup-"+p.name+"-"+mode] = rate(i) / tcp
			}
		}
	}
	b.StopTimer()
	for k, v := range metrics {
		b.ReportMetric(v, k)
	}
}

// streamEcho sends n messages on one FullDuplexCall stream and receives
// their echoes: all at once from two goroutines (window), or one after
// the other (ping-pong). It returns the time taken.
func streamEcho(c testpb.TestServiceClient, n int, window bool) (time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		return 0, err
	}
	req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, streamMsgSize)}}
	sent := make(chan error, 1)
	send := func() error {
		if err := st.Send(req); err != nil {
			return fmt.Errorf("Send: %w", err)
		}
		return nil
	}
	if window {
		go func() {
			for range n {
				if err := send(); err != nil {
					sent <- err
					return
				}
			}
			sent <- st.CloseSend()
		}()
	}
	for range n {
		if !window {
			if err := send(); err != nil {
				return 0, err
			}
		}
		resp, err := st.Recv()
		if err != nil {
			return 0, fmt.Errorf("Recv: %w", err)
		}
		if len(resp.GetPayload().GetBody()) != streamMsgSize {
			return 0, fmt.Errorf("echo of %d bytes", len(resp.GetPayload().GetBody()))
		}
	}
	if window {
		if err := <-sent; err != nil {
			return 0, err
		}
	} else if err := st.CloseSend(); err != nil {
		return 0, err
	}
	if _, err := st.Recv(); err != io.EOF {
		return 0, fmt.Errorf("Recv at the end: %v", err)
	}
	return time.Since(start), nil
}
