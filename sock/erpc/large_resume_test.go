package erpc_test

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestExactlyOnceLargeResume: the server's answers to an 8 MiB
// exactly-once request are lost once it holds half of it; the attempt
// times out, and the retry asks where the server is and sends only the
// fragments it misses. The handler runs once, and the response is the
// request. It logs the fragments each attempt sent (go test -v -run
// TestExactlyOnceLargeResume).
func TestExactlyOnceLargeResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cut atomic.Bool
		var cli *client
		var before atomic.Int64 // fragments sent when the retry began; -1 until then
		before.Store(-1)
		drop := func(src, _ netip.Addr, _ []byte) bool {
			if src != serverHost || !cut.Load() {
				return false
			}
			retries, sent := erpc.FragCounts(cli.rpc)
			if retries == 0 {
				return true
			}
			// The retry's first packet from the server comes before
			// the answer to its resume query: no fragment of the
			// retry has gone yet.
			before.CompareAndSwap(-1, int64(sent))
			return false
		}
		var h holder
		srv, c, s := holderPairOn(t, memnet.Config{Seed: 84, LinkMbps: 1000, Drop: drop}, nil, &h)
		cli = c
		req := pattern(8 << 20)
		nfrag := (len(req) + erpc.MaxMsgSize - 1) / erpc.MaxMsgSize
		call1 := cli.enqueue(t, s, 1, req, erpc.ExactlyOnce)
		cli.runUntil(t, 5*time.Second, func() bool { return srv.rpc.Stats().LargeBytes >= len(req)/2 })
		cut.Store(true)
		cli.runUntil(t, 10*time.Second, allDone([]*call{call1}))
		if call1.err != nil || !bytes.Equal(call1.data, req) {
			t.Fatalf("8 MiB exactly-once echo: %d bytes, %v", len(call1.data), call1.err)
		}
		st := cli.rpc.Stats()
		first := int(before.Load())
		again := int(st.FragmentsSent) - first
		skipped := int(st.FragmentsSkipped)
		t.Logf("%d fragments: the first attempt sent %d; the retry skipped %d the server held and sent %d (%d without resuming); %d transport RPCs in all, with the resume query and the response's pulls",
			nfrag, first, skipped, again, nfrag, st.RequestsSent)
		if st.Retries != 1 || first < nfrag/2 || skipped < nfrag/2 || again != nfrag-skipped || st.ResumeRefused != 0 {
			t.Fatalf("client: %+v; first attempt %d fragments, retry %d", st, first, again)
		}
		if sst := srv.rpc.Stats(); sst.RequestsServed != 1 || sst.LargeBytes != 0 || sst.LargeRefused != 0 {
			t.Fatalf("server: %d runs, %d large bytes, %d refused", sst.RequestsServed, sst.LargeBytes, sst.LargeRefused)
		}
	})
}
