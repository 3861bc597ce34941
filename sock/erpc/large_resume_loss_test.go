package erpc_test

import (
	"bytes"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestExactlyOnceLargeUnderLoss: 8 MiB exactly-once echoes over a
// network that loses, duplicates and reorders packets, and goes silent
// from the server for 150 ms in every 400 ms, so that attempts are cut
// and resumed: every request completes with its own bytes and runs
// once. (The fragments the retries skip depend on where the silences
// fall, which the goroutines' schedule moves: logged, not checked.)
func TestExactlyOnceLargeUnderLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		silent := func(src, _ netip.Addr, _ []byte) bool {
			return src == serverHost && time.Since(start)%(400*time.Millisecond) >= 250*time.Millisecond
		}
		nw := memnet.New(memnet.Config{Seed: 85, Loss: 0.02, Duplicate: 0.01, Reorder: 0.02, Delay: 100 * time.Microsecond,
			LinkMbps: 1000, Drop: silent})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) { _ = nx.Register(1, echo, erpc.Dispatch) }, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		const n = 6
		for i := range n {
			req := pattern(8<<20 - i*1000)
			c := cli.enqueue(t, s, 1, req, erpc.ExactlyOnce)
			cli.runUntil(t, 60*time.Second, allDone([]*call{c}))
			if c.err != nil || !bytes.Equal(c.data, req) {
				t.Fatalf("request %d: %d bytes, %v", i, len(c.data), c.err)
			}
		}
		st, sst := cli.rpc.Stats(), srv.rpc.Stats()
		t.Logf("%d retries, %d fragments sent, %d skipped, %d refused; server: %d runs, %d fragments again", st.Retries, st.FragmentsSent, st.FragmentsSkipped, st.ResumeRefused, sst.RequestsServed, sst.FragmentsAgain)
		if sst.RequestsServed != n || st.ResumeRefused != 0 || st.Retries == 0 {
			t.Fatalf("%d runs, %d claims refused", sst.RequestsServed, st.ResumeRefused)
		}
	})
}
