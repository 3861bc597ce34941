package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// An asyncClient keeps many RPCs in flight from one goroutine: the
// client of an RPC layer whose endpoint belongs to one goroutine and
// completes requests in its event loop (erpc's Rpc), or a Homa socket
// driven the same way (Send, and Recv of any response). Throughput mode
// drives it with one goroutine per client, where other clients get one
// goroutine per RPC in flight, so that erpc and bare Homa compare like
// with like; workload mode does so when the client is singleOwner (and
// gives RPCs a goroutine each otherwise, for the most parallel sends);
// latency mode uses call. Every method but singleOwner is for the
// goroutine driving the client.
type asyncClient interface {
	client
	// singleOwner reports whether call serves one goroutine at a time.
	singleOwner() bool
	// start sends req as the RPC of slot, a small number the caller
	// gives each RPC it has in flight at once; when the RPC completes,
	// done runs inside loop with the response (valid during the call)
	// or the error. req must not change until then.
	start(slot int, req []byte, done completion) error
	// loop runs the event loop until deadline (zero: no deadline), ctx's
	// end, or a completion calls stop.
	loop(ctx context.Context, deadline time.Time) error
	// stop makes loop return once the completion calling it returns.
	stop()
}

// completion receives the outcome of an asyncClient's RPC.
type completion func(slot int, resp []byte, err error)

// asyncClients returns the clients as asyncClients if every one is (and,
// if single, is singleOwner).
func asyncClients(cs []client, single bool) ([]asyncClient, bool) {
	out := make([]asyncClient, len(cs))
	for i, c := range cs {
		a, ok := c.(asyncClient)
		if !ok || single && !a.singleOwner() {
			return nil, false
		}
		out[i] = a
	}
	return out, len(out) > 0
}

// asyncSlot is one lane of an asyncClient in throughput mode: the RPC in
// flight in it, its size stream and its measurements.
type asyncSlot struct {
	rng *rand.Rand
	req []byte
	t0  time.Time
	m   *measured
}

// throughputAsync is throughput mode for asyncClients: the same lanes
// (lane i on client i mod clients, its sizes from stream streamLanes+i),
// but each client's lanes are slots of one goroutine running the
// client's event loop, each starting its next RPC from the completion
// of the last.
func (r *runner) throughputAsync(ctx context.Context, cancel context.CancelCauseFunc, clients []asyncClient,
	remaining *atomic.Int64, deadline time.Time, lanes []measured) {
	var wg sync.WaitGroup
	for k, c := range clients {
		var slots []asyncSlot
		for i := k; i < len(lanes); i += len(clients) {
			slots = append(slots, asyncSlot{rng: rand.New(rand.NewPCG(r.cfg.Seed, streamLanes+uint64(i))), m: &lanes[i]})
		}
		wg.Go(func() { r.driveSlots(ctx, cancel, c, slots, remaining, deadline) })
	}
	wg.Wait()
}

// driveSlots keeps every slot's RPC going on c until the count or the
// deadline is reached, or ctx ends. A wrong reply cancels the phase;
// other failures are counted, as in lane.
func (r *runner) driveSlots(ctx context.Context, cancel context.CancelCauseFunc, c asyncClient, slots []asyncSlot,
	remaining *atomic.Int64, deadline time.Time) {
	active, over := 0, false
	var done completion
	issue := func(s int) bool {
		for remaining.Add(-1) >= 0 && ctx.Err() == nil {
			if !deadline.IsZero() && time.Now().After(deadline) {
				return false
			}
			sl := &slots[s]
			sl.req = r.pattern[:r.sample(sl.rng)]
			sl.t0 = time.Now()
			if err := c.start(s, sl.req, done); err != nil {
				sl.m.failed++
				continue
			}
			return true
		}
		return false
	}
	done = func(s int, resp []byte, err error) {
		if over {
			return // failed by the client's close after the phase
		}
		sl := &slots[s]
		rtt := time.Since(sl.t0)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				sl.m.failed++
			}
		default:
			if err := checkReply(sl.req, resp, r.cfg.ReplySize, spotCheck); err != nil {
				cancel(err)
			} else {
				sl.m.add(len(sl.req), rtt)
				r.prog.add()
			}
		}
		if !issue(s) {
			if active--; active == 0 {
				c.stop()
			}
		}
	}
	for s := range slots {
		if issue(s) {
			active++
		}
	}
	if active > 0 {
		if err := c.loop(ctx, time.Time{}); err != nil && ctx.Err() == nil {
			cancel(err)
		}
	}
	over = true
}

// openLoopAsync is workload mode for asyncClients: the arrivals of
// openLoop (arrival i on client i mod clients, sizes and times from the
// same stream, so every protocol sees the same ones), each client's
// started from its own goroutine, which runs the client's event loop
// until its next arrival. It returns the time of the last completion.
func (r *runner) openLoopAsync(ctx context.Context, cancel context.CancelCauseFunc, clients []asyncClient,
	start time.Time, inFlight, dropped *atomic.Int64, m *measured, mu *sync.Mutex) time.Time {
	var (
		wg   sync.WaitGroup
		last = make([]time.Time, len(clients))
	)
	for k, c := range clients {
		wg.Go(func() { last[k] = r.arrivals(ctx, cancel, c, k, len(clients), start, inFlight, dropped, m, mu) })
	}
	wg.Wait()
	var latest time.Time
	for _, t := range last {
		if t.After(latest) {
			latest = t
		}
	}
	return latest
}

// pendingRPC is an RPC in flight in workload mode.
type pendingRPC struct {
	req []byte
	t0  time.Time
}

// arrivals starts client k's share (of n) of the arrivals, then waits
// for their completions; it returns the time of its last completion.
func (r *runner) arrivals(ctx context.Context, cancel context.CancelCauseFunc, c asyncClient, k, n int,
	start time.Time, inFlight, dropped *atomic.Int64, m *measured, mu *sync.Mutex) time.Time {
	cfg := r.cfg
	rate := workload.RatePerSecond(cfg.Dist, cfg.LoadMbps)
	rng := rand.New(rand.NewPCG(cfg.Seed, streamArrivals))
	end := start.Add(cfg.Duration)
	var (
		slots  []pendingRPC
		free   []int // slots not in flight
		active int
		ending bool // no more arrivals: stop when the last completes
		over   bool // the phase has ended: ignore what the client's close fails
		latest time.Time
		local  measured
		done   completion
	)
	done = func(s int, resp []byte, err error) {
		if over {
			return
		}
		now := time.Now()
		p := slots[s]
		free = append(free, s)
		active--
		inFlight.Add(-1)
		if err == nil {
			err = checkReply(p.req, resp, cfg.ReplySize, spotCheck)
			if err != nil {
				cancel(err)
			}
		}
		if err != nil {
			local.failed++
		} else {
			local.add(len(p.req), now.Sub(p.t0))
			latest = now
			r.prog.add()
		}
		if ending && active == 0 {
			c.stop()
		}
	}
	next := start
	for i := 0; ; i++ {
		next = next.Add(workload.NextGap(rng, rate))
		if !next.Before(end) {
			break
		}
		size := r.sample(rng)
		if i%n != k {
			continue
		}
		if err := c.loop(ctx, next); err != nil || ctx.Err() != nil {
			if err != nil && ctx.Err() == nil {
				cancel(err)
			}
			break
		}
		if inFlight.Load() >= int64(cfg.MaxOutstanding) {
			dropped.Add(1)
			continue
		}
		var s int
		if len(free) > 0 {
			s, free = free[len(free)-1], free[:len(free)-1]
		} else {
			s = len(slots)
			slots = append(slots, pendingRPC{})
		}
		slots[s] = pendingRPC{req: r.pattern[:size], t0: time.Now()}
		inFlight.Add(1)
		if err := c.start(s, slots[s].req, done); err != nil {
			inFlight.Add(-1)
			free = append(free, s)
			local.failed++
			continue
		}
		active++
	}
	ending = true
	if active > 0 && ctx.Err() == nil {
		if err := c.loop(ctx, time.Time{}); err != nil && ctx.Err() == nil {
			cancel(err)
		}
	}
	over = true
	inFlight.Add(-int64(active))
	mu.Lock()
	m.merge(&local)
	mu.Unlock()
	return latest
}
