package erpc_test

import (
	"bytes"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestLargeEchoAllocs bounds what an 8 MiB echo allocates, client and
// server and the in-memory network together, once the Rpcs' pools hold
// the large storages of an earlier echo: fragments are written straight
// into the message's storage, the response goes from the handler's
// buffer and is pulled from it (or from the completion record, which
// keeps that buffer and gives it back to the pool once acknowledged),
// and the storages are reused. What is left is the response Call
// returns (a new slice: one message) and small change: a few hundred
// small allocations, per fragment and per Homa RPC, under a quarter of
// a message together. The network reorders, so that fragments also
// arrive ahead of one missing. Copying at every step, the same echo
// took over nine messages.
func TestLargeEchoAllocs(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name  string
		opts  []erpc.ReqOption
		bound float64 // allocated bytes per echo, in messages
	}{
		{"at most once", nil, 1.25},
		{"exactly once", []erpc.ReqOption{erpc.ExactlyOnce}, 1.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := memnet.New(memnet.Config{Seed: 84, Reorder: 0.2, Delay: 50 * time.Microsecond, Jitter: 200 * time.Microsecond, LinkMbps: 10_000})
				defer nw.Close()
				_, cli, s := echoWorld(t, nw)
				req := pattern(size)
				call := func() {
					resp, err := cli.rpc.Call(t.Context(), s, 1, req, tc.opts...)
					if err != nil || !bytes.Equal(resp, req) {
						t.Fatalf("%d bytes, %v", len(resp), err)
					}
				}
				call() // the pools fill
				call()
				const n = 4
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range n {
					call()
				}
				runtime.ReadMemStats(&after)
				per := float64(after.TotalAlloc-before.TotalAlloc) / n / size
				t.Logf("%.3f messages allocated per 8 MiB echo, %d allocations", per, (after.Mallocs-before.Mallocs)/n)
				if per > tc.bound {
					t.Fatalf("%.3f messages allocated per 8 MiB echo, want at most %.2f", per, tc.bound)
				}
			})
		})
	}
}

// TestLargeResponseTaken: EnqueueResponse takes a large response's
// storage over and leaves the buffer empty, to be freed as usual; a
// small one is copied and the buffer keeps it.
func TestLargeResponseTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 85})
		defer nw.Close()
		type left struct{ n, max int }
		var lefts []left
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				r := h.Rpc()
				b, err := r.AllocMsgBuffer(len(h.Request()))
				if err != nil {
					panic(err)
				}
				copy(b.Data(), h.Request())
				_ = r.EnqueueResponse(h, b)
				lefts = append(lefts, left{b.Len(), b.MaxLen()})
				r.FreeMsgBuffer(b)
			}, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)
		for _, n := range []int{2 << 20, 5000} {
			req := pattern(n)
			resp, err := cli.rpc.Call(t.Context(), s, 1, req)
			if err != nil || !bytes.Equal(resp, req) {
				t.Fatalf("%d bytes: %d back, %v", n, len(resp), err)
			}
		}
		if len(lefts) != 2 || lefts[0] != (left{0, 0}) || lefts[1] != (left{5000, 5000}) {
			t.Fatalf("buffers left by EnqueueResponse: %+v, want [{0 0} {5000 5000}]", lefts)
		}
	})
}
