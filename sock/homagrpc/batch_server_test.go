package homagrpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

func TestBatchFrame(t *testing.T) {
	frames := [][]byte{{1, 2, 3}, {}, {4}}
	b := appendBatchHeader(nil, kindBatchReq, len(frames))
	for _, f := range frames {
		b = appendBatchEntry(b, f)
	}
	want := []byte{
		frameVersion, kindBatchReq, 0, 3, 0, 0, 0, 0,
		0, 0, 0, 3, 1, 2, 3,
		0, 0, 0, 0,
		0, 0, 0, 1, 4,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("batch % x, want % x", b, want)
	}
	if n := batchLen(frames); n != len(b) {
		t.Errorf("batchLen %d, appended %d", n, len(b))
	}
	got, err := parseBatch(b, kindBatchReq, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(frames) {
		t.Fatalf("%d entries, want %d", len(got), len(frames))
	}
	for i := range got {
		if !bytes.Equal(got[i], frames[i]) {
			t.Errorf("entry %d: % x, want % x", i, got[i], frames[i])
		}
	}
	for n := range len(b) {
		if _, err := parseBatch(b[:n], kindBatchReq, nil); !errors.Is(err, errMalformed) {
			t.Errorf("truncated to %d bytes: %v, want errMalformed", n, err)
		}
	}
	bad := map[string][]byte{
		"trailing":   append(bytes.Clone(b), 0),
		"kind":       append([]byte{frameVersion, kindBatchResp}, b[2:]...),
		"reserved":   append(append([]byte{}, b[:7]...), append([]byte{1}, b[8:]...)...),
		"one entry":  appendBatchEntry(appendBatchHeader(nil, kindBatchReq, 1), nil),
		"no entries": appendBatchHeader(nil, kindBatchReq, 0),
		"too many":   appendBatchHeader(nil, kindBatchReq, maxBatchFrames+1),
	}
	for name, m := range bad {
		if _, err := parseBatch(m, kindBatchReq, nil); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}

// FuzzParseBatch parses, re-encodes and compares.
func FuzzParseBatch(f *testing.F) {
	f.Add(appendBatchEntry(appendBatchEntry(appendBatchHeader(nil, kindBatchReq, 2), []byte{1}), nil))
	f.Fuzz(func(t *testing.T, msg []byte) {
		es, err := parseBatch(msg, kindBatchReq, nil)
		if err != nil {
			return
		}
		b := appendBatchHeader(nil, kindBatchReq, len(es))
		for _, e := range es {
			b = appendBatchEntry(b, e)
		}
		if !bytes.Equal(b, msg) {
			t.Fatalf("re-encoded % x, parsed % x", b, msg)
		}
	})
}

// dataFrame is a data frame of stream id carrying one message of n
// bytes.
func dataFrame(id uint64, n int) []byte {
	b := appendStreamReqHeader(nil, opData, 0, id, 1<<20)
	b = appendChunkHeader(b, chunkFlagLast, n)
	return append(b, make([]byte, n)...)
}

// batchOf is a batch of the frames, whatever their number.
func batchOf(frames ...[]byte) []byte {
	b := appendBatchHeader(nil, kindBatchReq, 0)
	binary.BigEndian.PutUint16(b[batchOffCount:], uint16(len(frames)))
	for _, f := range frames {
		b = appendBatchEntry(b, f)
	}
	return b
}

// A server refuses a batch it cannot take, answering with one stream
// response that ends every stream in it with codes.Internal, and counts
// it; data frames in a valid batch that name no open stream are
// answered as when alone (no more messages) and counted.
func TestBatchHostile(t *testing.T) {
	srv, cs, srvAddr := rawWorld(t)
	rpc := func(req []byte) []byte {
		t.Helper()
		id, err := cs.Send(srvAddr, req, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := cs.Recv(context.Background(), id)
		if err != nil || m.Err != nil {
			t.Fatalf("%v %v", err, m.Err)
		}
		defer m.Release()
		return bytes.Clone(m.Data)
	}
	many := make([][]byte, maxBatchFrames+1)
	for i := range many {
		many[i] = dataFrame(uint64(i+1), 1)
	}
	overrun := batchOf(dataFrame(1, 1), dataFrame(2, 1))
	binary.BigEndian.PutUint32(overrun[batchHeaderLen:], 1<<30)
	pull := appendStreamReqHeader(nil, opPull, 0, 3, 1<<20)
	truncated := dataFrame(2, 10)
	truncated = truncated[:len(truncated)-1]
	refused := map[string][]byte{
		"too many frames":  batchOf(many...),
		"length overruns":  overrun,
		"a pull in it":     batchOf(dataFrame(1, 1), pull),
		"a chunk overruns": batchOf(dataFrame(1, 1), truncated),
		"one frame":        batchOf(dataFrame(1, 1)),
	}
	for name, req := range refused {
		resp := rpc(req)
		r, err := parseStreamResp(resp)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if codes.Code(r.resp.code) != codes.Internal || r.flags&srespFlagEnd == 0 || r.seq != 0 {
			t.Errorf("%s: code %v, flags %#x, seq %d, want the end with codes.Internal", name, codes.Code(r.resp.code), r.flags, r.seq)
		}
	}
	resp := rpc(batchOf(dataFrame(7, 3), dataFrame(8, 0), dataFrame(9, 5)))
	es, err := parseBatch(resp, kindBatchResp, nil)
	if err != nil || len(es) != 3 {
		t.Fatalf("answer to a batch naming unknown streams: %d entries, %v", len(es), err)
	}
	for i, e := range es {
		r, err := parseStreamResp(e)
		if err != nil || r.seq != 0 || r.flags&srespFlagEnd == 0 || r.resp.code != 0 {
			t.Errorf("entry %d: %+v, %v, want the end with status OK, numbered 0", i, r, err)
		}
	}
	st := srv.Stats()
	if st.BadBatches != uint64(len(refused)) || st.Malformed != uint64(len(refused)) {
		t.Errorf("BadBatches %d, Malformed %d, want %d", st.BadBatches, st.Malformed, len(refused))
	}
	if st.Batches != 1 || st.BatchFrames != 3 || st.StaleFrames != 3 {
		t.Errorf("Batches %d, BatchFrames %d, StaleFrames %d, want 1, 3, 3", st.Batches, st.BatchFrames, st.StaleFrames)
	}
}

// echoService echoes each FullDuplexCall message; stream i waits for
// gates[i], when set, before it echoes its message 1.
type echoService struct {
	testpb.UnimplementedTestServiceServer
	gates map[byte]chan struct{}
}

func (e *echoService) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	var p testpb.Payload
	for {
		if err := st.RecvMsg(&p); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if g := e.gates[p.Body[0]]; g != nil && p.Body[1] == 1 {
			<-g
		}
		if err := st.SendMsg(&p); err != nil {
			return err
		}
	}
}

// rawWorld serves a server with opts on an in-memory network and
// returns it, a client socket to send it frames of the test's making,
// and its address. Everything ends with the test. Its sockets do not
// poll: a reader spinning in a testing/synctest bubble would keep the
// bubble's clock from advancing.
func rawWorld(t *testing.T, opts ...ServerOption) (*Server, *sock.Socket, netip.AddrPort) {
	return memServer(t, &sock.Config{PollDuration: -1}, nil, opts...)
}

// memServer serves a server with opts, its services registered by
// register (if set), on an in-memory network whose sockets have cfg, and
// returns it, a client socket and the server's address. Everything ends
// with the test.
func memServer(t *testing.T, cfg *sock.Config, register func(*Server), opts ...ServerOption) (*Server, *sock.Socket, netip.AddrPort) {
	nw := memnet.New(memnet.Config{})
	t.Cleanup(func() { nw.Close() })
	srvAddr := netip.MustParseAddrPort("10.0.0.1:4000")
	ss, err := socktest.OpenMem(nw, srvAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(opts...)
	if register != nil {
		register(srv)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ss) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	cs, err := socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.2:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return srv, cs, srvAddr
}

// echoWorld serves svc on an in-memory network and opens n streams to
// it from a client, each of which has sent message 0 and received its
// echo. Everything ends with the test's bubble.
func echoWorld(t *testing.T, svc *echoService, n int) (*Server, []grpc.ClientStream) {
	srv, sts, _ := echoWorldSock(t, svc, n)
	return srv, sts
}

// echoWorldSock is echoWorld that also returns the client's socket, its
// server made with opts.
func echoWorldSock(t *testing.T, svc *echoService, n int, opts ...ServerOption) (*Server, []grpc.ClientStream, *sock.Socket) {
	srv, cs, srvAddr := memServer(t, &sock.Config{PollDuration: -1}, func(s *Server) { testpb.RegisterTestServiceServer(s, svc) }, opts...)
	cc := NewClientConn(cs, srvAddr)
	t.Cleanup(func() { cc.Close() })
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	sts := make([]grpc.ClientStream, n)
	for i := range sts {
		var err error
		if sts[i], err = cc.NewStream(context.Background(), desc, testpb.TestService_FullDuplexCall_FullMethodName); err != nil {
			t.Fatal(err)
		}
		send(t, sts, i, 0)
		recvEcho(t, sts, i, 0)
	}
	synctest.Wait()
	return srv, sts, cs
}

// closeStreams half-closes the streams and expects their ends.
func closeStreams(t testing.TB, sts []grpc.ClientStream) {
	for i := range sts {
		if err := sts[i].CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := sts[i].RecvMsg(&testpb.Payload{}); err != io.EOF {
			t.Errorf("stream %d ends with %v, want io.EOF", i, err)
		}
	}
}

// Over a real server, frames of several streams travel in batches, each
// answered with the handlers' echoes, in order per stream; two streams
// whose handlers hold their frames leave the others' frames to batches.
func TestBatchEchoServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const streams, msgs = 6, 4
		gate := make(chan struct{})
		svc := &echoService{gates: map[byte]chan struct{}{}}
		for i := range muxInFlight {
			svc.gates[byte(i)] = gate
		}
		srv, sts := echoWorld(t, svc, streams)
		// The slow streams' data frames hold the mux's RPCs.
		for i := range muxInFlight {
			send(t, sts, i, 1)
		}
		synctest.Wait()
		var rwg sync.WaitGroup
		for i := muxInFlight; i < streams; i++ {
			rwg.Go(func() {
				for k := 1; k < msgs; k++ {
					send(t, sts, i, k)
					recvEcho(t, sts, i, k)
				}
			})
		}
		synctest.Wait()
		close(gate)
		rwg.Wait()
		for i := range muxInFlight {
			recvEcho(t, sts, i, 1)
		}
		closeStreams(t, sts)
		st := srv.Stats()
		if st.Batches == 0 || st.BatchFrames < 2*st.Batches || st.BadBatches != 0 || st.StaleFrames != 0 {
			t.Errorf("server stats %+v, want batches of frames, none refused or stale", st)
		}
	})
}

// A handler that takes a message of a batch and does not react delays
// the answer to the other frames of its batch by batchHold at most; what
// it says later reaches its client through a pull.
func TestBatchHoldBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate, slow := make(chan struct{}), make(chan struct{})
		svc := &echoService{gates: map[byte]chan struct{}{muxInFlight: slow}}
		for i := range muxInFlight {
			svc.gates[byte(i)] = gate
		}
		_, sts := echoWorld(t, svc, muxInFlight+2)
		for i := range muxInFlight {
			send(t, sts, i, 1) // held by their handlers: the mux is full
		}
		synctest.Wait()
		send(t, sts, muxInFlight, 1)   // its handler will not react
		send(t, sts, muxInFlight+1, 1) // its handler echoes at once
		synctest.Wait()
		start := time.Now()
		close(gate) // the batch goes
		recvEcho(t, sts, muxInFlight+1, 1)
		if d := time.Since(start); d < batchHold || d > 2*batchHold {
			t.Errorf("the echo in the batch came after %v, want the hold, %v", d, batchHold)
		}
		for i := range muxInFlight {
			recvEcho(t, sts, i, 1)
		}
		close(slow)
		recvEcho(t, sts, muxInFlight, 1)
		closeStreams(t, sts)
	})
}

// Data frames alone held by handlers that do not react hold the mux's
// RPCs for batchHold at most: then the client's other streams' frames
// go.
func TestHoldBoundsLoneFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		svc := &echoService{gates: map[byte]chan struct{}{}}
		for i := range muxInFlight {
			svc.gates[byte(i)] = gate
		}
		_, sts := echoWorld(t, svc, muxInFlight+1)
		start := time.Now()
		for i := range muxInFlight {
			send(t, sts, i, 1) // held by handlers that do not react
		}
		send(t, sts, muxInFlight, 1) // waits for the mux
		recvEcho(t, sts, muxInFlight, 1)
		if d := time.Since(start); d < batchHold || d > 2*batchHold {
			t.Errorf("the waiting frame's echo came after %v, want the hold, %v", d, batchHold)
		}
		close(gate)
		for i := range muxInFlight {
			recvEcho(t, sts, i, 1)
		}
		closeStreams(t, sts)
	})
}

// holdsFiredForTest is how many times the hold timers of srv's listeners
// fired.
func holdsFiredForTest(srv *Server) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	n := 0
	for l := range srv.listeners {
		l.holds.mu.Lock()
		n += l.holds.fired
		l.holds.mu.Unlock()
	}
	return n
}

// Messages that come now and then, each echoed by its handler at once,
// cost no hold timer firing: the timer set for a frame held is stopped
// once the frame is answered.
func TestHoldTimerQuietWhenAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sts := echoWorld(t, &echoService{gates: map[byte]chan struct{}{}}, 1)
		const msgs = 20
		for k := 1; k <= msgs; k++ {
			send(t, sts, 0, k)
			recvEcho(t, sts, 0, k)
			time.Sleep(10 * batchHold)
		}
		if n := holdsFiredForTest(srv); n > 1 {
			t.Errorf("the hold timer fired %d times for %d messages answered at once, want none", n, msgs)
		}
		closeStreams(t, sts)
	})
}
