package homagrpc

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/sock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// A client's streams to a server are pulled through one pull set: 3,000
// idle streams from one socket (its server's share for one host raised
// to take them), past the 2,000 RPCs a server's socket holds for one
// client host, all stay open and answer, and idling costs the client a
// few RPCs a second, not one per stream.
func TestPullSetManyIdleStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 3,000 streams")
	}
	synctest.Test(t, func(t *testing.T) {
		const streams = 3000
		srv, sts, cs := echoWorldSock(t, &echoService{}, streams, MaxStreamsPerHost(streams))
		before := cs.Stats().RPCsStarted
		const idle = 10 * time.Second // ten keepalive intervals
		time.Sleep(idle)
		synctest.Wait()
		rpcs := cs.Stats().RPCsStarted - before
		t.Logf("%d RPCs in %v of %d idle streams", rpcs, idle, streams)
		if rpcs > 4*uint64(idle/time.Second) {
			t.Errorf("%d idle streams cost %d RPCs in %v, want a few a keepalive interval", streams, rpcs, idle)
		}
		if st := srv.Stats(); st.Abandoned != 0 {
			t.Errorf("%d streams abandoned while their client pulled", st.Abandoned)
		}
		for i := range sts {
			send(t, sts, i, 1)
		}
		for i := range sts {
			recvEcho(t, sts, i, 1)
		}
		closeStreams(t, sts)
	})
}

// The answer to a pull set round-trips, and one that lies about its
// lengths or count is refused before any answer is handed out.
func TestPullAnswersFrame(t *testing.T) {
	b := appendPullAnswersHeader(nil, 3)
	frames := [][]byte{[]byte("one"), nil, bytes.Repeat([]byte{7}, 300)}
	for i, f := range frames {
		b = appendPullAnswer(b, uint64(10+i), f)
	}
	var ids []uint64
	var got [][]byte
	if err := parsePullAnswers(b, func(id uint64, f []byte) { ids, got = append(ids, id), append(got, f) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || ids[0] != 10 || ids[2] != 12 || !bytes.Equal(got[0], frames[0]) || len(got[1]) != 0 || !bytes.Equal(got[2], frames[2]) {
		t.Fatalf("parsed ids %v, frames %q", ids, got)
	}
	for _, bad := range [][]byte{
		b[:len(b)-1],                      // the last answer cut
		append(append([]byte{}, b...), 0), // a byte after the answers
		append(appendPullAnswersHeader(nil, 1<<30), b[pullAnswersHdrLen:]...), // a count beyond the bytes
		appendPullAnswer(appendPullAnswersHeader(nil, 2), 1, []byte("x")),     // a count beyond the answers
	} {
		calls := 0
		if err := parsePullAnswers(bad, func(uint64, []byte) { calls++ }); !errors.Is(err, errMalformed) || calls != 0 {
			t.Errorf("%d bytes: %v after %d answers, want errMalformed before any", len(bad), err, calls)
		}
	}
}

// FuzzParsePullAnswers: parsing never panics, and what parses is
// rebuilt into the same bytes.
func FuzzParsePullAnswers(f *testing.F) {
	b := appendPullAnswersHeader(nil, 2)
	b = appendPullAnswer(b, 1, []byte("answer"))
	f.Add(appendPullAnswer(b, 2, nil))
	f.Add(appendPullAnswersHeader(nil, 0))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var ids []uint64
		var frames [][]byte
		err := parsePullAnswers(msg, func(id uint64, f []byte) { ids, frames = append(ids, id), append(frames, f) })
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			if len(ids) != 0 {
				t.Fatalf("%d answers handed out before the error", len(ids))
			}
			return
		}
		again := appendPullAnswersHeader(nil, len(ids))
		for i := range ids {
			again = appendPullAnswer(again, ids[i], frames[i])
		}
		if !bytes.Equal(again, msg) {
			t.Fatalf("rebuilt %x, want %x", again, msg)
		}
	})
}

// What a hostile client lists in pull sets is bounded: a pull set of
// more streams than the server runs at once is refused, and the ends of
// streams it does not know wait in the answers only up to that many,
// however often it lists them.
func TestPullSetHostile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxCalls = 100 // above maxPullers: a socket's own bound comes first
		srv, cs, srvAddr := rawWorld(t, MaxConcurrentCalls(maxCalls))
		pullsOf := func(puller uint64, first, n int) []byte {
			b := appendStreamReqHeader(nil, opPulls, 0, puller, 0)
			for i := range n {
				b = appendPullEntry(b, uint64(first+i), 1<<20)
			}
			return b
		}
		pulls := func(first, n int) []byte { return pullsOf(1, first, n) }
		send := func(req []byte) uint64 {
			t.Helper()
			id, err := cs.Send(srvAddr, req, 0)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		recv := func(id uint64) []byte {
			t.Helper()
			m, err := cs.Recv(context.Background(), id)
			if err != nil || m.Err != nil {
				t.Fatalf("%v %v", err, m.Err)
			}
			defer m.Release()
			return bytes.Clone(m.Data)
		}
		// Too many streams: refused.
		r, err := parseStreamResp(recv(send(pulls(1, maxCalls+1))))
		if err != nil || codes.Code(r.resp.code) != codes.ResourceExhausted || r.flags&srespFlagEnd == 0 {
			t.Fatalf("a pull set of %d streams: code %v, flags %#x, %v; want its end with ResourceExhausted", maxCalls+1, codes.Code(r.resp.code), r.flags, err)
		}
		// Unknown streams, listed again and again while their answers
		// wait for the next pull set: each pull set is answered (by the
		// next) with what fits, and what waits stays bounded.
		var ids []uint64
		for range 20 {
			ids = append(ids, send(pulls(1000, maxCalls)))
		}
		answered := 0
		for _, id := range ids {
			if err := parsePullAnswers(recv(id), func(uint64, []byte) { answered++ }); err != nil {
				t.Fatal(err)
			}
		}
		st := srv.Stats()
		if st.BadPullSets != 1 || st.PullSets != 20 || st.StalePulls != 20*maxCalls {
			t.Errorf("stats %+v, want 1 bad pull set, 20 taken, %d stale pulls", st, 20*maxCalls)
		}
		if answered < maxCalls || answered > 20*maxCalls {
			t.Errorf("%d ends answered", answered)
		}
		sets := srv.pullSetsForTest()
		if len(sets) != 1 {
			t.Fatalf("%d pull sets, want the client's", len(sets))
		}
		ps := sets[0]
		ps.mu.Lock()
		waiting := len(ps.ready)
		ps.mu.Unlock()
		if waiting > maxCalls {
			t.Errorf("%d answers wait for the next pull set, want at most %d", waiting, maxCalls)
		}
		t.Logf("%d ends answered, %d waiting", answered, waiting)
		// Pull sets of more pullers than a socket may have (puller 1
		// above is one of them): one is refused at once (whichever the
		// server took last: its goroutines take them in parallel); the
		// others are held, and answered empty after the keepalive
		// interval.
		ids = ids[:0]
		for p := range maxPullers {
			ids = append(ids, send(pullsOf(uint64(100+p), 0, 0)))
		}
		refused := 0
		for _, id := range ids {
			msg := recv(id)
			if msg[1] == kindStreamResp {
				if r, err := parseStreamResp(msg); err != nil || codes.Code(r.resp.code) != codes.ResourceExhausted {
					t.Errorf("a pull set refused with code %v, %v; want ResourceExhausted", codes.Code(r.resp.code), err)
				}
				refused++
				continue
			}
			if err := parsePullAnswers(msg, func(uint64, []byte) {}); err != nil {
				t.Fatal(err)
			}
		}
		if refused != 1 {
			t.Errorf("%d pull sets of %d pullers refused, want 1", refused, maxPullers+1)
		}
		if st := srv.Stats(); st.BadPullSets != 2 {
			t.Errorf("%d pull sets refused, want 2", st.BadPullSets)
		}
	})
	// With no pull set held (a client that lists and never comes
	// back), the ends wait, up to the bound.
	ps := &pullSet{}
	for i := range 100 {
		ps.putStale(uint64(i), endFrameBytes(nil), 50)
	}
	if len(ps.ready) != 50 || ps.stale != 50 {
		t.Errorf("%d ends wait (%d counted), want 50", len(ps.ready), ps.stale)
	}
}

// TestPullSetsBoundedPerListener: the client sockets together keep at
// most as many pull sets at a listener as it runs streams at once, however
// many pullers they name within their own bound.
func TestPullSetsBoundedPerListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxCalls = 3
		srv, cs, srvAddr := rawWorld(t, MaxConcurrentCalls(maxCalls))
		var ids []uint64
		for p := range maxCalls + 1 {
			id, err := cs.Send(srvAddr, appendStreamReqHeader(nil, opPulls, 0, uint64(100+p), 0), 0)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		refused := 0
		for _, id := range ids {
			m, err := cs.Recv(context.Background(), id)
			if err != nil || m.Err != nil {
				t.Fatalf("%v %v", err, m.Err)
			}
			if m.Data[1] == kindStreamResp {
				if r, err := parseStreamResp(m.Data); err != nil || codes.Code(r.resp.code) != codes.ResourceExhausted {
					t.Errorf("a pull set refused with code %v, %v; want ResourceExhausted", codes.Code(r.resp.code), err)
				}
				refused++
			}
			m.Release()
		}
		if st := srv.Stats(); refused != 1 || st.BadPullSets != 1 || len(srv.pullSetsForTest()) != maxCalls {
			t.Errorf("%d of %d pull sets refused (%d counted), %d kept; want 1, 1 and %d", refused, maxCalls+1, st.BadPullSets, len(srv.pullSetsForTest()), maxCalls)
		}
	})
}

// Two ClientConns on one socket keep a pull set each at the server: one
// does not answer the other's, which would make each send its next at
// once, without end.
func TestPullSetsOfTwoClientConns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cs, srvAddr := memServer(t, &sock.Config{PollDuration: -1}, func(s *Server) { testpb.RegisterTestServiceServer(s, &echoService{}) })
		var sts []grpc.ClientStream
		for range 2 {
			cc := NewClientConn(cs, srvAddr)
			t.Cleanup(func() { cc.Close() })
			desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
			for range 3 {
				st, err := cc.NewStream(context.Background(), desc, testpb.TestService_FullDuplexCall_FullMethodName)
				if err != nil {
					t.Fatal(err)
				}
				sts = append(sts, st)
				send(t, sts, len(sts)-1, 0)
				recvEcho(t, sts, len(sts)-1, 0)
			}
		}
		synctest.Wait()
		before := cs.Stats().RPCsStarted
		const idle = 10 * time.Second
		time.Sleep(idle)
		synctest.Wait()
		if rpcs := cs.Stats().RPCsStarted - before; rpcs > 2*4*uint64(idle/time.Second) {
			t.Errorf("two ClientConns' idle streams cost %d RPCs in %v, want a few a keepalive interval each", rpcs, idle)
		}
		for i := range sts {
			send(t, sts, i, 1)
			recvEcho(t, sts, i, 1)
		}
		closeStreams(t, sts)
	})
}

// A ClientConn whose pull set the server forgot (it had no stream for
// four keepalive intervals) is served again through a new one when it
// opens a stream: its messages come in the answers to the new pull set.
func TestPullSetForgottenAndAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sts, _ := echoWorldSock(t, &echoService{}, 1)
		closeStreams(t, sts)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if sets := srv.pullSetsForTest(); len(sets) != 0 {
			t.Fatalf("%d pull sets kept for a client without streams for 10 s, want none", len(sets))
		}
		before := srv.Stats().PullSets
		// A new stream of the same ClientConn: its echoes are answered
		// through a pull set again.
		cc := sts[0].(*clientStream).c
		desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
		st, err := cc.NewStream(context.Background(), desc, testpb.TestService_FullDuplexCall_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		again := []grpc.ClientStream{st}
		for i := range 3 {
			send(t, again, 0, i)
			recvEcho(t, again, 0, i)
		}
		if srv.Stats().PullSets == before {
			t.Error("the new stream was pulled without a pull set")
		}
		closeStreams(t, again)
	})
}
