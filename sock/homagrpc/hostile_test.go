package homagrpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// plainEcho echoes each FullDuplexCall message and answers UnaryCall,
// whatever the messages hold.
type plainEcho struct {
	testpb.UnimplementedTestServiceServer
}

func (plainEcho) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	for {
		var p testpb.Payload
		if err := st.RecvMsg(&p); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := st.SendMsg(&p); err != nil {
			return err
		}
	}
}

func (plainEcho) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// hostileMethods are what a hostile client's opens and calls name.
var hostileMethods = []string{
	testpb.TestService_FullDuplexCall_FullMethodName,
	testpb.TestService_StreamingOutputCall_FullMethodName,
	testpb.TestService_UnaryCall_FullMethodName,
	"/no.Such/Method",
}

// hostileFrame draws a request a client could send a server: a stream
// frame of any op (open, data, pull, cancel, pull set) or a batch of
// data frames, for streams 1-3 of the sender's socket, with any flags,
// credit and chunks (messages that decode and messages that do not,
// ending or not, flagged compressed or not), or a unary call.
func hostileFrame(t *rapid.T) []byte {
	id := uint64(rapid.IntRange(1, 3).Draw(t, "stream"))
	credit := rapid.SampledFrom([]uint64{0, 1, 100, 1 << 20, 1 << 62}).Draw(t, "credit")
	flags := byte(rapid.IntRange(0, 3).Draw(t, "flags"))
	chunks := func(b []byte) []byte {
		for range rapid.IntRange(0, 3).Draw(t, "chunks") {
			var body []byte
			if rapid.Bool().Draw(t, "decodes") {
				body, _ = proto.Marshal(&testpb.Payload{Body: rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "payload")})
			} else {
				body = rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "garbage")
			}
			b = appendChunkHeader(b, byte(rapid.IntRange(0, 3).Draw(t, "chunkFlags")), len(body))
			b = append(b, body...)
		}
		return b
	}
	data := func() []byte { return chunks(appendStreamReqHeader(nil, opData, flags, id, credit)) }
	switch rapid.IntRange(0, 6).Draw(t, "kind") {
	case 0:
		b := appendStreamReqHeader(nil, opOpen, flags, id, credit)
		b, _ = appendRequestHead(b, reqHead{method: rapid.SampledFrom(hostileMethods).Draw(t, "method")})
		return chunks(b)
	case 1:
		return data()
	case 2:
		return appendStreamReqHeader(nil, opPull, 0, id, credit)
	case 3:
		return appendStreamReqHeader(nil, opCancel, 0, id, 0)
	case 4:
		b := appendStreamReqHeader(nil, opPulls, 0, uint64(rapid.IntRange(1, 2).Draw(t, "puller")), 0)
		for range rapid.IntRange(0, 4).Draw(t, "pulled") {
			b = appendPullEntry(b, uint64(rapid.IntRange(1, 3).Draw(t, "pulledStream")), credit)
		}
		return b
	case 5:
		frames := make([][]byte, rapid.IntRange(1, 3).Draw(t, "batched"))
		for i := range frames {
			frames[i] = data()
		}
		return batchOf(frames...)
	}
	b, _ := appendRequestHead(nil, reqHead{method: rapid.SampledFrom(hostileMethods).Draw(t, "method"), callID: id})
	return append(b, rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "request")...)
}

// TestRapidHostileStreams: a client that sends a server any sequence of
// requests a client could send (hostileFrame), waiting for some answers
// and abandoning others, never crashes it and never leaves it unable to
// serve: afterwards another host's stream echoes, and once the hostile
// client has gone and the keepalive has passed four times over, the
// server holds no stream, no stream memory and no host's share.
func TestRapidHostileStreams(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var frames [][]byte
		var waits []bool
		for range rapid.IntRange(1, 25).Draw(rt, "requests") {
			frames = append(frames, hostileFrame(rt))
			waits = append(waits, rapid.Bool().Draw(rt, "wait"))
		}
		var failure string
		synctest.Test(t, func(t *testing.T) {
			failure = hostileRun(t, frames, waits)
		})
		if failure != "" {
			rt.Fatal(failure)
		}
	})
}

// hostileRun sends frames to a fresh server from a raw socket, awaiting
// the answers waits says (for 50 ms), then checks that the server serves
// and, once the sender has gone, holds nothing. It returns what failed.
func hostileRun(t *testing.T, frames [][]byte, waits []bool) string {
	nw := memnet.New(memnet.Config{})
	t.Cleanup(func() { nw.Close() })
	cfg := &sock.Config{PollDuration: -1}
	srvAddr := netip.MustParseAddrPort("10.0.0.1:4000")
	ss, err := socktest.OpenMem(nw, srvAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(MaxConcurrentCalls(10), InitialWindowSize(64), MaxStreamMemory(160)) // a host's shares: 2 streams, 40 bytes
	testpb.RegisterTestServiceServer(srv, plainEcho{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ss) }()
	defer func() {
		srv.Stop()
		<-served
	}()
	hostile, err := socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.2:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		id, err := hostile.Send(srvAddr, f, 0)
		if err != nil {
			return fmt.Sprintf("request %d: %v", i, err)
		}
		if !waits[i] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if m, err := hostile.Recv(ctx, id); err == nil {
			m.Release()
		} else {
			_ = hostile.Abort(id)
		}
		cancel()
	}

	// Another host is served meanwhile.
	good, err := socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.3:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	cc := NewClientConn(good, srvAddr)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := testpb.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		return fmt.Sprintf("another host's stream: %v", err)
	}
	want := &testpb.Payload{Body: []byte("good")}
	if err := st.SendMsg(want); err != nil {
		return fmt.Sprintf("another host's message: %v", err)
	}
	var got testpb.Payload
	if err := st.RecvMsg(&got); err != nil || !bytes.Equal(got.Body, want.Body) {
		return fmt.Sprintf("another host's echo: %q, %v", got.Body, err)
	}
	if err := st.CloseSend(); err != nil {
		return fmt.Sprintf("another host's half-close: %v", err)
	}
	if err := st.RecvMsg(&got); err != io.EOF {
		return fmt.Sprintf("another host's stream ends with %v, want io.EOF", err)
	}

	// The hostile client goes: what it left goes too.
	hostile.Close()
	time.Sleep(5 * defaultKeepalive)
	synctest.Wait()
	if n, mem, hosts := hostileLeft(srv); n != 0 || mem != 0 || hosts != 0 {
		return fmt.Sprintf("after the keepalive passed: %d streams, %d bytes of stream memory, %d hosts' shares", n, mem, hosts)
	}
	return ""
}

// hostileLeft is what srv holds: streams, stream memory, hosts' shares.
func hostileLeft(srv *Server) (streams int, mem int64, hosts int) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for l := range srv.listeners {
		l.smu.Lock()
		streams += len(l.streams)
		hosts += len(l.hosts)
		l.smu.Unlock()
	}
	return streams, srv.streamMem.used.Load(), hosts
}
