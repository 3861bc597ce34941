package erpc_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestExactlyOnceLargeResume: the server's answers to an 8 MiB
// exactly-once request are lost once it holds half of it. The next
// attempt asks where the server is and sends only the fragments it
// misses: a retry when the attempt times out, or, with no retries left,
// the request resumed from its ticket on a new session. Resumed after
// the server let the fragments go (MessageTimeout), it sends them all.
// The handler runs once, and the response is the request. It logs the
// fragments each attempt sent (go test -v -run
// TestExactlyOnceLargeResume).
func TestExactlyOnceLargeResume(t *testing.T) {
	for _, wait := range []time.Duration{-1, 0, 2100 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) { resumeCut(t, wait) })
	}
}

// resumeCut runs TestExactlyOnceLargeResume: the next attempt is a
// retry (wait < 0), or the request resumed from its ticket wait after
// it failed.
func resumeCut(t *testing.T, wait time.Duration) {
	ticket := wait >= 0
	var cut atomic.Bool
	var cli *client
	var before atomic.Int64 // fragments sent when the next attempt began; -1 until then
	before.Store(-1)
	drop := func(src, _ netip.Addr, _ []byte) bool {
		if src != serverHost || !cut.Load() {
			return false
		}
		retries, sent := erpc.FragCounts(cli.rpc)
		if retries == 0 {
			return true
		}
		// The retry's first packet from the server comes before the
		// answer to its resume query: no fragment of the retry has
		// gone yet.
		before.CompareAndSwap(-1, int64(sent))
		return false
	}
	nw := memnet.New(memnet.Config{Seed: 84, LinkMbps: 1000, Drop: drop})
	srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) { _ = nx.Register(1, echo, erpc.Dispatch) }, nil)
	ccfg := memConfig(nw)
	if ticket {
		ccfg.ExactlyOnce.MaxRetries = -1 // none
	}
	cli = newClient(t, ccfg, clientHost)
	defer func() { cli.close(); srv.close(); nw.Close() }()
	s := cli.connect(t, serverHost)

	req := pattern(8 << 20)
	nfrag := (len(req) + erpc.MaxMsgSize - 1) / erpc.MaxMsgSize
	c := cli.enqueue(t, s, 1, req, erpc.ExactlyOnce)
	cli.runUntil(t, 5*time.Second, func() bool { return srv.rpc.Stats().LargeBytes >= len(req)/2 })
	cut.Store(true)
	cli.runUntil(t, 10*time.Second, allDone([]*call{c}))
	resp, err := c.data, c.err
	if ticket {
		tk := erpc.TicketOf(err)
		if tk == nil {
			t.Fatalf("cut off with no retries: %v, want a failure with a ticket", err)
		}
		before.Store(int64(cli.rpc.Stats().FragmentsSent))
		time.Sleep(wait)
		cut.Store(false)
		if err := cli.rpc.DestroySession(s); err != nil {
			t.Fatal(err)
		}
		cli.runUntil(t, 5*time.Second, func() bool { e, _ := cli.rec.last(s); return e.ev == erpc.Disconnected })
		s = cli.connect(t, serverHost)
		resp, err = cli.rpc.Call(t.Context(), s, 1, req, erpc.Resume(tk))
	}
	if err != nil || !bytes.Equal(resp, req) {
		t.Fatalf("8 MiB exactly-once echo: %d bytes, %v", len(resp), err)
	}
	st := cli.rpc.Stats()
	first := int(before.Load())
	again := int(st.FragmentsSent) - first
	skipped := int(st.FragmentsSkipped)
	next := "a retry"
	if ticket {
		next = fmt.Sprintf("resumed from its ticket %v after the failure", wait)
	}
	t.Logf("next attempt %s; %d fragments: the first attempt sent %d; the next skipped %d the server held and sent %d (%d without resuming); %d transport RPCs in all, with the resume query and the response's pulls",
		next, nfrag, first, skipped, again, nfrag, st.RequestsSent)
	expired := wait > time.Second // MessageTimeout is 2 s
	if first < nfrag/2 || expired != (skipped == 0) || !expired && skipped < nfrag/2 || again != nfrag-skipped || st.ResumeRefused != 0 {
		t.Fatalf("client: %+v; first attempt %d fragments, the next %d", st, first, again)
	}
	sst := srv.rpc.Stats()
	if sst.RequestsServed != 1 || sst.LargeBytes != 0 || sst.LargeRefused != 0 || expired != (sst.LargeExpired == 1) {
		t.Fatalf("server: %d runs, %d large bytes, %d refused, %d expired", sst.RequestsServed, sst.LargeBytes, sst.LargeRefused, sst.LargeExpired)
	}
}
