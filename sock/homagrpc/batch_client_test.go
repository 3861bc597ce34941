package homagrpc

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// fakeStreamServer is a hand-made stream server on an in-memory
// network: it answers opens at once, echoing their messages, holds
// pulls, answers cancel frames, and hands data frames and batches to the
// test, which answers them with reply.
type fakeStreamServer struct {
	t    *testing.T
	s    *sock.Socket
	got  chan *sock.Message // data frames and batches
	stop context.CancelFunc

	// old: the server is of the version before batches, which answers
	// one as an unknown request.
	old bool

	mu      sync.Mutex
	refused int               // batches, when old
	seq     map[uint64]uint32 // of each stream's last answer
	pulls   []*sock.Message
	cancels []uint64
}

// bubblePair opens, on a new in-memory network, a server socket at
// 10.0.0.1:4000 and a client socket, for a testing/synctest bubble: they
// do not spin, which would keep the bubble from resting. The caller
// closes them.
func bubblePair(t *testing.T) (nw *memnet.Network, ss, cs *sock.Socket, srvAddr netip.AddrPort) {
	t.Helper()
	nw = memnet.New(memnet.Config{})
	srvAddr = netip.MustParseAddrPort("10.0.0.1:4000")
	cfg := &sock.Config{PollDuration: -1}
	ss, err := socktest.OpenMem(nw, srvAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err = socktest.OpenMem(nw, netip.MustParseAddrPort("10.0.0.2:0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nw, ss, cs, srvAddr
}

// newFakeStreamWorld starts a fake server (of the version before
// batches, if old) and returns it and a ClientConn to it; both end with
// the test's bubble.
func newFakeStreamWorld(t *testing.T, old bool) (*fakeStreamServer, *ClientConn) {
	nw, ss, cs, srvAddr := bubblePair(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeStreamServer{t: t, s: ss, got: make(chan *sock.Message, 64), stop: cancel, seq: map[uint64]uint32{}, old: old}
	var wg sync.WaitGroup
	wg.Go(func() { f.serve(ctx) })
	cc := NewClientConn(cs, srvAddr)
	t.Cleanup(func() {
		cc.Close()
		cs.Close()
		cancel()
		wg.Wait()
		f.mu.Lock()
		for _, m := range f.pulls {
			m.Release()
		}
		f.mu.Unlock()
		ss.Close()
		nw.Close()
	})
	return f, cc
}

func (f *fakeStreamServer) serve(ctx context.Context) {
	for {
		m, err := f.s.Recv(ctx, sock.Any)
		if err != nil {
			return
		}
		if m.Data[1] == kindBatchReq && f.old {
			f.mu.Lock()
			f.refused++
			f.mu.Unlock()
			_ = f.s.ReplyOwned(m, appendStatusResponse(nil, status.New(codes.Internal, "kind 5"), nil, nil, nil))
			m.Release()
			continue
		}
		if m.Data[1] == kindBatchReq {
			f.got <- m
			continue
		}
		r, err := parseStreamReq(m.Data)
		if err != nil {
			f.t.Errorf("the client sent a malformed frame: %v", err)
			m.Release()
			return
		}
		switch r.op {
		case opOpen:
			_ = f.s.ReplyOwned(m, f.answer(r))
			m.Release()
		case opPull, opPulls:
			f.mu.Lock()
			f.pulls = append(f.pulls, m)
			f.mu.Unlock()
		case opCancel:
			f.mu.Lock()
			f.cancels = append(f.cancels, r.id)
			f.mu.Unlock()
			_ = f.s.ReplyOwned(m, endFrameBytes(nil))
			m.Release()
		default:
			f.got <- m
		}
	}
}

// answer is the stream's next answer, echoing the frame's messages.
func (f *fakeStreamServer) answer(r streamReq) []byte {
	f.mu.Lock()
	f.seq[r.id]++
	seq := f.seq[r.id]
	f.mu.Unlock()
	b := appendStreamRespHeader(nil, 0, seq, 1<<20)
	b, _ = appendResponseHeader(b, 0, "", nil, nil, nil)
	return append(b, r.chunks...)
}

// nextSlow is next, after the time it takes an RPC of a mux that has
// not seen any return yet to be slow (muxSlowMin), if slow.
func (f *fakeStreamServer) nextSlow(slow bool) *sock.Message {
	if slow {
		synctest.Wait()
		time.Sleep(muxSlowMin)
	}
	return f.next()
}

// next is the next data frame or batch the client sent.
func (f *fakeStreamServer) next() *sock.Message {
	synctest.Wait()
	select {
	case m := <-f.got:
		return m
	default:
		f.t.Fatal("the client sent no data frame")
		return nil
	}
}

// frames splits m into the stream frames it carries.
func (f *fakeStreamServer) frames(m *sock.Message) []streamReq {
	f.t.Helper()
	raw := [][]byte{m.Data}
	if m.Data[1] == kindBatchReq {
		var err error
		if raw, err = parseBatch(m.Data, kindBatchReq, nil); err != nil {
			f.t.Fatal(err)
		}
	}
	var rs []streamReq
	for _, b := range raw {
		r, err := parseStreamReq(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// reply answers m, a frame or a batch, echoing each frame's messages.
func (f *fakeStreamServer) reply(m *sock.Message) {
	var resp []byte
	if rs := f.frames(m); len(rs) == 1 {
		resp = f.answer(rs[0])
	} else {
		resp = appendBatchHeader(nil, kindBatchResp, len(rs))
		for _, r := range rs {
			resp = appendBatchEntry(resp, f.answer(r))
		}
	}
	_ = f.s.ReplyOwned(m, resp)
	m.Release()
}

// payload is message k of stream i.
func payload(i, k int) *testpb.Payload { return &testpb.Payload{Body: []byte{byte(i), byte(k)}} }

// openStreams opens n bidirectional streams, each sending message 0 in
// its open; the fake server answers the opens and holds the pulls.
func openStreams(t *testing.T, cc *ClientConn, n int) ([]grpc.ClientStream, []context.CancelFunc) {
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	sts := make([]grpc.ClientStream, n)
	cancels := make([]context.CancelFunc, n)
	for i := range sts {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st, err := cc.NewStream(ctx, desc, testpb.TestService_FullDuplexCall_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(payload(i, 0)); err != nil {
			t.Fatal(err)
		}
		sts[i], cancels[i] = st, cancel
	}
	synctest.Wait()
	return sts, cancels
}

// send sends message k on stream i.
func send(t testing.TB, sts []grpc.ClientStream, i, k int) {
	t.Helper()
	if err := sts[i].SendMsg(payload(i, k)); err != nil {
		t.Fatal(err)
	}
}

// fillMux sends message 1 on the first muxInFlight streams, each of
// which goes alone (returned, as the fake server took them; the second
// once the first is slow), and then on the others, which wait for a
// batch.
func fillMux(t *testing.T, f *fakeStreamServer, sts []grpc.ClientStream) []*sock.Message {
	t.Helper()
	var alone []*sock.Message
	for i := range muxInFlight {
		send(t, sts, i, 1)
		alone = append(alone, f.nextSlow(i > 0))
	}
	for i := muxInFlight; i < len(sts); i++ {
		send(t, sts, i, 1)
	}
	return alone
}

// recvEcho receives the echoes of messages ks of stream i, in order.
func recvEcho(t testing.TB, sts []grpc.ClientStream, i int, ks ...int) {
	t.Helper()
	for _, k := range ks {
		var got testpb.Payload
		if err := sts[i].RecvMsg(&got); err != nil {
			t.Fatalf("stream %d, message %d: %v", i, k, err)
		}
		if want := payload(i, k); !proto.Equal(&got, want) {
			t.Fatalf("stream %d received %v, want %v", i, got.Body, want.Body)
		}
	}
}

// Data frames of several streams ready while the mux has muxInFlight
// RPCs in flight to the server go together in one batch, in the order
// they became ready, once one of those returns; each stream receives its
// answers in order.
func TestBatchCarriesStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, cc := newFakeStreamWorld(t, false)
		sts, _ := openStreams(t, cc, 5)
		var alone []*sock.Message
		for i := range muxInFlight {
			send(t, sts, i, 1)
			m := f.nextSlow(i > 0)
			if m.Data[1] != kindStreamReq {
				t.Fatalf("frame %d: kind %d, want a frame alone (%d)", i, m.Data[1], kindStreamReq)
			}
			alone = append(alone, m)
		}
		for i := muxInFlight; i < len(sts); i++ {
			send(t, sts, i, 1)
		}
		send(t, sts, muxInFlight, 2) // joins the stream's frame waiting
		synctest.Wait()
		if len(f.got) != 0 {
			t.Fatalf("%d frames sent while the mux is full, want none", len(f.got))
		}
		f.reply(alone[0])
		b := f.next()
		if b.Data[1] != kindBatchReq {
			t.Fatalf("kind %d, want a batch (%d)", b.Data[1], kindBatchReq)
		}
		rs := f.frames(b)
		if len(rs) != len(sts)-muxInFlight {
			t.Fatalf("a batch of %d frames, want %d", len(rs), len(sts)-muxInFlight)
		}
		for j, r := range rs {
			if want := cc.streamIDForTest(sts[muxInFlight+j]); r.id != want {
				t.Errorf("entry %d names stream %d, want %d", j, r.id, want)
			}
		}
		f.reply(b)
		f.reply(alone[1])
		recvEcho(t, sts, 0, 0, 1)
		recvEcho(t, sts, 1, 0, 1)
		for i := muxInFlight; i < len(sts); i++ {
			recvEcho(t, sts, i, 0, 1)
		}
		// Message 2 of stream 2 went in its next frame, alone.
		m := f.next()
		if rs := f.frames(m); len(rs) != 1 || rs[0].id != cc.streamIDForTest(sts[muxInFlight]) {
			t.Fatalf("next frame: %+v, want stream %d's alone", rs, muxInFlight)
		}
		f.reply(m)
		recvEcho(t, sts, muxInFlight, 2)
	})
}

// A stream canceled while its frame travels in a batch ends with
// codes.Canceled and tells the server; the other streams of the batch
// get their answers.
func TestBatchCanceledStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, cc := newFakeStreamWorld(t, false)
		sts, cancels := openStreams(t, cc, 5)
		alone := fillMux(t, f, sts)
		f.reply(alone[0])
		b := f.next()
		victim := muxInFlight + 1
		cancels[victim]()
		synctest.Wait()
		f.reply(b)
		f.reply(alone[1])
		for i := range sts {
			if i == victim {
				continue
			}
			recvEcho(t, sts, i, 0, 1)
		}
		var got testpb.Payload
		for {
			err := sts[victim].RecvMsg(&got)
			if err != nil {
				if status.Code(err) != codes.Canceled {
					t.Errorf("the canceled stream: %v, want codes.Canceled", err)
				}
				break
			}
		}
		synctest.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.cancels) != 1 || f.cancels[0] != cc.streamIDForTest(sts[victim]) {
			t.Errorf("cancel frames for %v, want one for stream %d", f.cancels, cc.streamIDForTest(sts[victim]))
		}
	})
}

// A lone data frame goes at once, alone, without waiting for time to
// pass.
func TestBatchLoneFrameAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, cc := newFakeStreamWorld(t, false)
		sts, _ := openStreams(t, cc, 1)
		start := time.Now()
		send(t, sts, 0, 1)
		m := f.next()
		if d := time.Since(start); d != 0 {
			t.Errorf("the frame went after %v of the bubble's time, want at once", d)
		}
		if m.Data[1] != kindStreamReq {
			t.Errorf("kind %d, want a frame alone (%d)", m.Data[1], kindStreamReq)
		}
		f.reply(m)
		recvEcho(t, sts, 0, 0, 1)
	})
}

// streamIDForTest is the id of a stream of c.
func (c *ClientConn) streamIDForTest(st grpc.ClientStream) uint64 { return st.(*clientStream).id }

// A server of the version before batches answers a batch as an unknown
// request: the client sends its frames again, alone, and every frame
// after them too.
func TestBatchOldServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, cc := newFakeStreamWorld(t, true)
		sts, _ := openStreams(t, cc, 5)
		alone := fillMux(t, f, sts)
		f.reply(alone[0]) // the batch goes, and is refused
		for i := muxInFlight; i < len(sts); i++ {
			m := f.next()
			if rs := f.frames(m); m.Data[1] != kindStreamReq || rs[0].id != cc.streamIDForTest(sts[i]) {
				t.Fatalf("frame %d sent again: kind %d, stream %d, want stream %d's alone", i, m.Data[1], rs[0].id, cc.streamIDForTest(sts[i]))
			}
			f.reply(m)
			recvEcho(t, sts, i, 0, 1)
		}
		// From now on frames go alone, however many are in flight.
		for i := muxInFlight; i < len(sts); i++ {
			send(t, sts, i, 2)
		}
		for i := muxInFlight; i < len(sts); i++ {
			m := f.next()
			if m.Data[1] != kindStreamReq {
				t.Fatalf("kind %d, want a frame alone", m.Data[1])
			}
			f.reply(m)
		}
		for i := muxInFlight; i < len(sts); i++ {
			recvEcho(t, sts, i, 2)
		}
		f.reply(alone[1])
		recvEcho(t, sts, 0, 0, 1)
		recvEcho(t, sts, 1, 0, 1)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.refused != 1 {
			t.Errorf("%d batches sent to the old server, want 1", f.refused)
		}
	})
}

// A frame ready while an RPC of the mux is in flight waits for it to
// return, and goes with the next batch; only once the RPC in flight has
// been out twice as long as the mux's RPCs lately took (a batch held by
// a handler that computes) does the frame go in a second RPC.
func TestBatchSecondWhenSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, cc := newFakeStreamWorld(t, false)
		sts, _ := openStreams(t, cc, 2)
		const took = time.Millisecond
		for k := 1; k <= 24; k++ { // RPCs that take a millisecond each
			send(t, sts, 0, k)
			m := f.next()
			time.Sleep(took)
			f.reply(m)
			recvEcho(t, sts, 0, k-1)
		}
		recvEcho(t, sts, 0, 24)
		// A prompt return takes the frame waiting.
		send(t, sts, 0, 25)
		first := f.next()
		send(t, sts, 1, 1)
		synctest.Wait()
		if len(f.got) != 0 {
			t.Fatal("a frame went while the RPC in flight was not slow")
		}
		time.Sleep(took / 2)
		f.reply(first)
		m := f.next()
		if rs := f.frames(m); len(rs) != 1 || rs[0].id != cc.streamIDForTest(sts[1]) {
			t.Fatalf("after the return: %+v, want stream 1's frame", rs)
		}
		f.reply(m)
		recvEcho(t, sts, 0, 25)
		recvEcho(t, sts, 1, 0, 1)
		// A slow one does not keep it: it goes once the first has been
		// out twice as long as the RPCs took, not before.
		send(t, sts, 0, 26)
		held := f.next()
		start := time.Now()
		send(t, sts, 1, 2)
		time.Sleep(took)
		synctest.Wait()
		if len(f.got) != 0 {
			t.Fatalf("a frame went after %v, before the RPC in flight was slow", time.Since(start))
		}
		time.Sleep(took + took/2)
		m = f.next()
		if rs := f.frames(m); len(rs) != 1 || rs[0].id != cc.streamIDForTest(sts[1]) {
			t.Fatalf("while the first is slow: %+v, want stream 1's frame", rs)
		}
		f.reply(m)
		recvEcho(t, sts, 1, 2)
		f.reply(held)
		recvEcho(t, sts, 0, 26)
	})
}

// Streams that answer each echo with their next message at once, as the
// streams of a ping-pong do, send those messages in one batch: the
// goroutine that delivers a batch's answers lets the streams it woke
// run before the mux sends again (see Gathering), where the first of
// them used to go alone and the others after it. On one processor, so
// that the streams woken run where the delivery yields; most batches
// then carry every stream's frame (none did before).
func TestBatchGathersAnsweredStreams(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		const streams, rounds = 4, 20
		f, cc := newFakeStreamWorld(t, false)
		sts, _ := openStreams(t, cc, streams)
		var wg sync.WaitGroup
		for i := range sts {
			wg.Go(func() {
				recvEcho(t, sts, i, 0) // the open's
				for k := 1; k <= rounds; k++ {
					send(t, sts, i, k)
					recvEcho(t, sts, i, k)
				}
			})
		}
		full, requests := 0, 0
		for answered := 0; answered < streams*rounds; {
			m := f.next()
			n := len(f.frames(m))
			if n == streams {
				full++
			}
			requests++
			answered += n
			f.reply(m)
		}
		wg.Wait()
		t.Logf("%d of %d requests carried every stream's frame", full, requests)
		if full < requests/2 {
			t.Errorf("%d of %d requests carried every stream's frame, want most", full, requests)
		}
	})
}
