package erpc_test

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// load keeps up to outstanding requests in flight over sessions, each
// request made by next(i) for i = 0, 1, ..., until limit requests were
// issued or issuing stops being allowed (more returns false); then it
// waits for the rest. It returns the calls in issue order.
func (c *client) load(t *testing.T, sessions []erpc.Session, outstanding, limit int, more func() bool, issue func(i int, s erpc.Session) *call) []*call {
	t.Helper()
	var calls []*call
	inFlight := 0
	for {
		for inFlight < outstanding && len(calls) < limit && more() {
			calls = append(calls, issue(len(calls), sessions[len(calls)%len(sessions)]))
			inFlight++
		}
		if inFlight == 0 {
			return calls
		}
		before := len(c.completed)
		if err := c.rpc.RunEventLoop(time.Millisecond); err != nil {
			t.Fatalf("event loop: %v", err)
		}
		inFlight -= len(c.completed) - before
	}
}

// TestAtMostOnceUnderLoss: with loss, duplication and reordering in the
// network, no handler runs twice for one request, and every request that
// reported success ran exactly once. Homa gives this underneath; the
// layer must not undo it.
func TestAtMostOnceUnderLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 20, Loss: 0.1, Duplicate: 0.05, Reorder: 0.05, Delay: 200 * time.Microsecond})
		defer nw.Close()
		runs := map[uint64]int{} // request id -> handler runs; the server loop only
		var mu sync.Mutex
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				mu.Lock()
				runs[binary.BigEndian.Uint64(h.Request())]++
				mu.Unlock()
				echo(h)
			}, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		sessions := []erpc.Session{cli.connect(t, serverHost), cli.connect(t, serverHost)}

		const n = 1000
		calls := cli.load(t, sessions, 16, n, func() bool { return true }, func(i int, s erpc.Session) *call {
			return cli.enqueue(t, s, 1, binary.BigEndian.AppendUint64(nil, uint64(i)))
		})
		mu.Lock()
		defer mu.Unlock()
		ok := 0
		for i, c := range calls {
			if c.err != nil {
				t.Errorf("request %d failed: %v", i, c.err)
				continue
			}
			ok++
			if got := binary.BigEndian.Uint64(c.data); got != uint64(i) {
				t.Fatalf("request %d answered as %d", i, got)
			}
			if runs[uint64(i)] != 1 {
				t.Errorf("request %d succeeded after %d runs of its handler", i, runs[uint64(i)])
			}
		}
		for id, k := range runs {
			if k > 1 {
				t.Errorf("request %d ran %d times", id, k)
			}
		}
		if ok != n {
			t.Errorf("%d of %d requests succeeded", ok, n)
		}
		if st := nw.Stats(); st.Lost == 0 || st.Duplicated == 0 {
			t.Fatalf("the network lost %d and duplicated %d packets: the test needs both", st.Lost, st.Duplicated)
		}
	})
}

// TestExactlyOnceCounter: a counter-increment service under 10% loss,
// with timeouts induced twice (the server's handler goroutine stops for
// longer than RetryTimeout and is started again; then a partition lasts
// longer than the transport's peer timeout): the final counter equals the
// number of calls that reported success, and the values they got back
// are exactly 1..counter: none lost, none counted twice.
func TestExactlyOnceCounter(t *testing.T) {
	for _, mode := range []erpc.HandlerMode{erpc.Dispatch, erpc.Background} {
		name := map[erpc.HandlerMode]string{erpc.Dispatch: "dispatch", erpc.Background: "background"}[mode]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { counterTest(t, mode) })
		})
	}
}

func counterTest(t *testing.T, mode erpc.HandlerMode) {
	var partitioned atomic.Bool
	nw := memnet.New(memnet.Config{Seed: 21, Loss: 0.1, Delay: time.Millisecond, Drop: func(src, dst netip.Addr, _ []byte) bool {
		return partitioned.Load() && (src == serverHost || dst == serverHost)
	}})
	defer nw.Close()

	var counter, runs atomic.Uint64
	scfg := memConfig(nw)
	scfg.BackgroundThreads = 2
	srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
		_ = nx.Register(1, func(h *erpc.ReqHandle) {
			if !h.ExactlyOnce() {
				panic("counter request without exactly-once")
			}
			runs.Add(1)
			v := counter.Add(1)
			_ = respond(h, binary.BigEndian.AppendUint64(nil, v))
		}, mode)
	}, nil)
	defer srv.close()
	cli := newClient(t, memConfig(nw), clientHost)
	defer cli.close()
	sessions := []erpc.Session{cli.connect(t, serverHost), cli.connect(t, serverHost)}

	// The faults, on the bubble's clock.
	start := time.Now()
	var faults sync.WaitGroup
	defer faults.Wait()
	faults.Add(1)
	go func() {
		defer faults.Done()
		time.Sleep(100 * time.Millisecond)
		srv.stop() // the handler goroutine stops: requests wait, attempts time out
		time.Sleep(250 * time.Millisecond)
		srv.start()
		time.Sleep(200 * time.Millisecond)
		partitioned.Store(true) // longer than the transport's peer timeout
		time.Sleep(300 * time.Millisecond)
		partitioned.Store(false)
	}()
	const limit = 20000
	calls := cli.load(t, sessions, 16, limit, func() bool { return time.Since(start) < 1200*time.Millisecond }, func(i int, s erpc.Session) *call {
		c, err := cli.try(s, 1, []byte("+1"), erpc.ExactlyOnce)
		if err != nil {
			t.Fatalf("call %d at %v: %v; events %v; %v", i, time.Since(start), err, cli.rec.events, cli.rec.events[len(cli.rec.events)-1].err)
		}
		return c
	})
	faults.Wait()

	var got []uint64
	for i, c := range calls {
		if c.err != nil {
			t.Errorf("call %d failed: %v", i, c.err)
			continue
		}
		got = append(got, binary.BigEndian.Uint64(c.data))
	}
	slices.Sort(got)
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("successful calls got back ...%v...: value %d is missing or repeated", got[max(0, i-3):i+1], i+1)
		}
	}
	if c := counter.Load(); c != uint64(len(got)) || runs.Load() != c {
		t.Fatalf("counter %d, handler runs %d, successful calls %d", c, runs.Load(), len(got))
	}
	cs, ss := cli.rpc.Stats(), srv.rpc.Stats()
	t.Logf("%d calls; client: %d retries; server: %d duplicates answered from records, %d while in progress, %d stale; network: %+v",
		len(calls), cs.Retries, ss.Duplicates, ss.InProgressDups, ss.StaleDups, nw.Stats().Lost)
	if cs.Retries == 0 || ss.Duplicates+ss.InProgressDups == 0 || len(calls) < 1000 {
		t.Fatalf("the faults did not exercise exactly-once: %d calls, %d retries, %d duplicates", len(calls), cs.Retries, ss.Duplicates+ss.InProgressDups)
	}
	if len(calls) == limit {
		t.Fatalf("the load hit its limit of %d calls before the faults were over", limit)
	}

	// Idle, the client acknowledges everything: the records go.
	cli.runUntil(t, 2*time.Second, func() bool { return srv.rpc.Stats().Records == 0 })
	if st := srv.rpc.Stats(); st.RecordBytes != 0 || st.RecordsReserved != 0 {
		t.Fatalf("records gone but %d bytes held, %d reserved", st.RecordBytes, st.RecordsReserved)
	}
}
