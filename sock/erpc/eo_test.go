package erpc_test

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// holder is a dispatch handler that keeps its requests for the test to
// answer later, from the test goroutine.
type holder struct {
	mu   sync.Mutex
	held []*erpc.ReqHandle
	runs atomic.Int32
}

func (h *holder) handle(r *erpc.ReqHandle) {
	h.runs.Add(1)
	h.mu.Lock()
	h.held = append(h.held, r)
	h.mu.Unlock()
}

func (h *holder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// holdingServer serves, on a new in-memory network (of seed) at
// serverHost with exactly-once configuration eo, request type 1 with a
// holder and type 2 with echo; both end with the test.
func holdingServer(t *testing.T, seed uint64, eo erpc.ExactlyOnceConfig) (*memnet.Network, *server, *holder) {
	nw := memnet.New(memnet.Config{Seed: seed})
	t.Cleanup(func() { nw.Close() })
	h := &holder{}
	scfg := memConfig(nw)
	scfg.ExactlyOnce = eo
	srv := newServer(t, scfg, serverHost, func(nx *erpc.Nexus) {
		_ = nx.Register(1, h.handle, erpc.Dispatch)
		_ = nx.Register(2, echo, erpc.Dispatch)
	}, nil)
	t.Cleanup(srv.close)
	return nw, srv, h
}

// answer responds to every held request with its own data.
func (h *holder) answer(t *testing.T) {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, r := range held {
		if err := respond(r, r.Request()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExactlyOnceInProgress: a handler slower than RetryTimeout sees its
// request's later attempts parked, not run; when it answers, the newest
// attempt gets the response.
func TestExactlyOnceInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 30})
		defer nw.Close()
		var h holder
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, h.handle, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		c := cli.enqueue(t, s, 1, []byte("once"), erpc.ExactlyOnce)
		// RetryTimeout is 100 ms: two more attempts by 250 ms.
		cli.runUntil(t, 250*time.Millisecond, func() bool { return cli.rpc.Stats().Retries == 2 })
		cli.runUntil(t, 40*time.Millisecond, func() bool { return srv.rpc.Stats().InProgressDups == 2 })
		if c.done {
			t.Fatalf("request done before its handler answered: %v", c.err)
		}
		h.answer(t)
		cli.runUntil(t, time.Second, func() bool { return c.done })
		if c.err != nil || string(c.data) != "once" {
			t.Fatalf("request: %q %v", c.data, c.err)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

// TestExactlyOnceCompleted: when the responses are lost long enough for
// the client to try again, the later attempt is answered from the
// completion record and the handler does not run again.
func TestExactlyOnceCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dropReplies atomic.Bool
		nw := memnet.New(memnet.Config{Seed: 31, Drop: func(src, dst netip.Addr, _ []byte) bool {
			return dropReplies.Load() && src == serverHost && dst == clientHost
		}})
		defer nw.Close()
		var runs atomic.Int32
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, func(h *erpc.ReqHandle) {
				runs.Add(1)
				echo(h)
			}, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		dropReplies.Store(true)
		c := cli.enqueue(t, s, 1, []byte("lost reply"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, func() bool { return cli.rpc.Stats().Retries >= 1 && srv.rpc.Stats().Duplicates >= 1 })
		dropReplies.Store(false)
		cli.runUntil(t, 2*time.Second, func() bool { return c.done })
		if c.err != nil || string(c.data) != "lost reply" {
			t.Fatalf("request: %q %v", c.data, c.err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}

// TestExactlyOnceRecordsFull: when no record fits, by count or by bytes,
// a new exactly-once request is refused unexecuted, with a retryable
// error; ordinary requests are not affected.
func TestExactlyOnceRecordsFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		eo   erpc.ExactlyOnceConfig
	}{
		// The client's host may take the whole budget here
		// (TestRecordsPerHost tests the hosts' shares).
		{"count", erpc.ExactlyOnceConfig{MaxRecords: 2, MaxRecordsPerHost: 2}},
		{"bytes", erpc.ExactlyOnceConfig{MaxResponse: 1000, MaxRecordBytes: 2500, MaxRecordBytesPerHost: 2500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw, srv, h := holdingServer(t, 32, tc.eo)
				cli := newClient(t, memConfig(nw), clientHost)
				defer cli.close()
				s := cli.connect(t, serverHost)

				a := cli.enqueue(t, s, 1, []byte("a"), erpc.ExactlyOnce)
				b := cli.enqueue(t, s, 1, []byte("b"), erpc.ExactlyOnce)
				cli.runUntil(t, time.Second, func() bool { return h.count() == 2 })
				refused := cli.enqueue(t, s, 1, []byte("c"), erpc.ExactlyOnce)
				plain := cli.enqueue(t, s, 2, []byte("plain"))
				cli.runUntil(t, time.Second, allDone([]*call{refused, plain}))
				if !errors.Is(refused.err, erpc.ErrRecordsFull) || !errors.Is(refused.err, erpc.ErrRetryable) {
					t.Fatalf("third exactly-once request: %v, want ErrRecordsFull (retryable)", refused.err)
				}
				if plain.err != nil {
					t.Fatalf("ordinary request: %v", plain.err)
				}
				if n := h.runs.Load(); n != 2 {
					t.Fatalf("handler ran %d times, want 2", n)
				}
				if st := srv.rpc.Stats(); st.Records != 2 || st.RecordsFull != 1 {
					t.Fatalf("%d records, %d refusals; want 2 and 1", st.Records, st.RecordsFull)
				}
				h.answer(t)
				cli.runUntil(t, time.Second, allDone([]*call{a, b}))
				if a.err != nil || b.err != nil {
					t.Fatalf("held requests: %v %v", a.err, b.err)
				}
				// Acknowledged, the records go and a new request fits.
				cli.runUntil(t, time.Second, func() bool { return srv.rpc.Stats().Records == 0 })
				again := cli.enqueue(t, s, 1, []byte("d"), erpc.ExactlyOnce)
				cli.runUntil(t, time.Second, func() bool { return h.count() == 1 })
				h.answer(t)
				cli.runUntil(t, time.Second, func() bool { return again.done })
				if again.err != nil {
					t.Fatalf("request after the records went: %v", again.err)
				}
			})
		})
	}
}

// TestExactlyOnceAckAboveFloor: a request held by its handler keeps the
// ack floor below it; a later request that completes is forgotten on its
// own acknowledgment, which carries its retry count.
func TestExactlyOnceAckAboveFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 33})
		defer nw.Close()
		var h holder
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, h.handle, erpc.Dispatch)
			_ = nx.Register(2, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		cli := newClient(t, memConfig(nw), clientHost)
		defer cli.close()
		s := cli.connect(t, serverHost)

		stuck := cli.enqueue(t, s, 1, []byte("held"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, func() bool { return h.count() == 1 })
		quick := cli.enqueue(t, s, 2, []byte("quick"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, func() bool { return quick.done })
		if quick.err != nil {
			t.Fatal(quick.err)
		}
		cli.runUntil(t, time.Second, func() bool { return srv.rpc.Stats().Records == 1 })
		if st := srv.rpc.Stats(); st.RecordsAcked != 1 {
			t.Fatalf("%d records acknowledged, want 1", st.RecordsAcked)
		}
		h.answer(t)
		cli.runUntil(t, time.Second, func() bool { return stuck.done && srv.rpc.Stats().Records == 0 })
	})
}

// TestExactlyOnceRecordTimeout: records the client never acknowledges (it
// went away) keep their response RecordTimeout, then only the fact that
// the request ran, until the client's lease expires.
func TestExactlyOnceRecordTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 34})
		defer nw.Close()
		srv := newServer(t, memConfig(nw), serverHost, func(nx *erpc.Nexus) {
			_ = nx.Register(1, echo, erpc.Dispatch)
		}, nil)
		defer srv.close()
		ccfg := memConfig(nw)
		ccfg.ExactlyOnce.AckDelay = time.Second // holds acknowledgments back
		cli := newClient(t, ccfg, clientHost)
		s := cli.connect(t, serverHost)
		c := cli.enqueue(t, s, 1, []byte("unacknowledged"), erpc.ExactlyOnce)
		cli.runUntil(t, time.Second, func() bool { return c.done })
		done := time.Now()
		cli.close() // gone before acknowledging

		const recordTimeout, lifetime = 2 * time.Second, time.Second // the defaults
		time.Sleep(recordTimeout - 100*time.Millisecond)
		if st := srv.rpc.Stats(); st.Records != 1 || st.RecordBytes == 0 || st.RecordsExpired != 0 {
			t.Fatalf("before RecordTimeout: %d records, %d bytes, %d expired", st.Records, st.RecordBytes, st.RecordsExpired)
		}
		time.Sleep(time.Until(done.Add(recordTimeout + 100*time.Millisecond)))
		if st := srv.rpc.Stats(); st.Records != 1 || st.RecordBytes != 0 || st.RecordsExpired != 1 || st.ResponsesLost != 1 {
			t.Fatalf("after RecordTimeout: %+v; want the record without its response", st)
		}
		time.Sleep(time.Until(done.Add(recordTimeout + lifetime + 100*time.Millisecond)))
		if st := srv.rpc.Stats(); st.Records != 1 {
			t.Fatalf("after PacketLifetime more: %d records, want 1", st.Records)
		}
		time.Sleep(5 * time.Second) // the lease (4 s) has gone by then
		if st := srv.rpc.Stats(); st.Records != 0 {
			t.Fatalf("after the lease: %d records, want 0", st.Records)
		}
	})
}

// TestRecordsPerHost: the records of one client host hold at most its
// shares of an Rpc's records (MaxRecordsPerHost, by default a fifth of
// MaxRecords) and of their bytes (MaxRecordBytesPerHost, a quarter of
// MaxRecordBytes): its exactly-once request beyond them is refused
// unexecuted (ErrRecordsFull, retryable) while another host's runs.
func TestRecordsPerHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		eo   erpc.ExactlyOnceConfig
	}{
		{"count", erpc.ExactlyOnceConfig{MaxRecords: 10}},                          // a host's share: 2 records
		{"bytes", erpc.ExactlyOnceConfig{MaxResponse: 1000, MaxRecordBytes: 8192}}, // a host's share: 2 records in progress
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw, srv, h := holdingServer(t, 33, tc.eo)
				a := newClient(t, memConfig(nw), clientHost)
				defer a.close()
				b := newClient(t, memConfig(nw), otherHost)
				defer b.close()
				sa, sb := a.connect(t, serverHost), b.connect(t, serverHost)

				held := []*call{a.enqueue(t, sa, 1, []byte("a1"), erpc.ExactlyOnce), a.enqueue(t, sa, 1, []byte("a2"), erpc.ExactlyOnce)}
				a.runUntil(t, time.Second, func() bool { return h.count() == 2 })
				refused := a.enqueue(t, sa, 1, []byte("a3"), erpc.ExactlyOnce)
				a.runUntil(t, time.Second, allDone([]*call{refused}))
				if !errors.Is(refused.err, erpc.ErrRecordsFull) || !errors.Is(refused.err, erpc.ErrRetryable) {
					t.Fatalf("host A's request beyond its share: %v, want ErrRecordsFull (retryable)", refused.err)
				}
				if st := srv.rpc.Stats(); st.RecordsFull != 1 || st.RecordsFullPerHost != 1 {
					t.Errorf("stats: %d requests refused for want of a record, %d for their host's share; want 1 and 1", st.RecordsFull, st.RecordsFullPerHost)
				}
				held = append(held, b.enqueue(t, sb, 1, []byte("b1"), erpc.ExactlyOnce))
				b.runUntil(t, time.Second, func() bool { return h.count() == 3 })
				h.answer(t)
				a.runUntil(t, time.Second, allDone(held[:2]))
				b.runUntil(t, time.Second, allDone(held[2:]))
				for _, c := range held {
					if c.err != nil {
						t.Errorf("a request within its host's share: %v", c.err)
					}
				}
				if n := h.runs.Load(); n != 3 {
					t.Errorf("handler ran %d times, want 3", n)
				}
			})
		})
	}
}
