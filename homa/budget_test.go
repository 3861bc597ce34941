package homa_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/resend"
)

// resendPatient gives RPCs 40 RESENDs before their peer counts as
// silent, so that loss alone does not end them.
var resendPatient = resend.Config{TimeoutResends: 40}

func TestGrantBudgetLends(t *testing.T) {
	b := homa.NewGrantBudget(100, 1000, 2)
	s0, s1 := b.Shard(0), b.Shard(1)
	if got := s0.Settle(0, 600, 50); got != 600 {
		t.Fatalf("lent %d of 600 from a free pool of 1000", got)
	}
	// Shard 1's best is further from completion than shard 0's: it gets
	// half of what is free.
	if got := s1.Settle(0, 1000, 80); got != 200 {
		t.Fatalf("a beaten shard was lent %d of 400 free, want half", got)
	}
	if got := b.Lent(); got != 800 {
		t.Fatalf("Lent = %d, want 800", got)
	}
	// Shard 0 asks for more and gets all that is free; giving back
	// always succeeds.
	if got := s0.Settle(600, 1000, 40); got != 800 {
		t.Fatalf("lent up to %d, want 800", got)
	}
	if got := s0.Settle(800, 100, 40); got != 100 {
		t.Fatalf("gave back to %d, want 100", got)
	}
	// Now shard 1 is the closer to completion: it is not held back.
	if got := s1.Settle(200, 1000, 10); got != 900 {
		t.Fatalf("the best shard was lent up to %d, want 900", got)
	}
	if got := s0.Settle(100, 1000, 40); got != 100 {
		t.Fatalf("an empty pool lent %d more", got-100)
	}
	s0.Settle(100, 0, ^uint32(0))
	s1.Settle(900, 0, ^uint32(0))
	if got := b.Lent(); got != 0 {
		t.Fatalf("Lent = %d after every loan came back", got)
	}
}

// TestGrantBudgetConcurrent: shards borrowing and repaying at once never
// hold more than the pool between them.
func TestGrantBudgetConcurrent(t *testing.T) {
	const shards, pool, rounds = 4, 10_000, 20_000
	b := homa.NewGrantBudget(1, pool, shards)
	var wg sync.WaitGroup
	for k := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, loan := b.Shard(k), 0
			for i := range rounds {
				if i%2 == 0 {
					loan = s.Settle(loan, pool, uint32(i%7+k))
				} else {
					loan = s.Settle(loan, loan/3, uint32(i%5+k))
				}
				if lent := b.Lent(); lent > pool || loan > pool {
					t.Errorf("lent %d (this shard %d) of a pool of %d", lent, loan, pool)
					return
				}
			}
			s.Settle(loan, 0, ^uint32(0))
		}()
	}
	wg.Wait()
	if got := b.Lent(); got != 0 {
		t.Fatalf("Lent = %d after every loan came back", got)
	}
}

// shardedHost is two cores standing for the two shards of one socket,
// granting from one incoming budget (or each from its own, when budget
// is nil), with clients that send at 10 Gbit/s.
type shardedHost struct {
	net     *sim.Net
	servers [2]*sim.Endpoint
	clients []*sim.Endpoint
	done    int
}

const (
	hostIncoming = 400_000 // the socket's budget: one core's default
	simUnsched   = 10_000
)

func newShardedHost(budget *homa.GrantBudget, clients int) *shardedHost {
	return newShardedHostOn(sim.Config{Seed: 1, Delay: 5 * time.Microsecond}, budget, clients)
}

// newShardedHostOn is newShardedHost on a network of cfg.
func newShardedHostOn(cfg sim.Config, budget *homa.GrantBudget, clients int) *shardedHost {
	h := &shardedHost{net: sim.New(cfg)}
	for k := range h.servers {
		cfg := core.Config{UnschedBytes: simUnsched, Grant: grant.Config{MaxIncoming: hostIncoming}, Resend: resendPatient}
		if budget != nil {
			cfg.Budget = budget.Shard(k)
		}
		s := h.net.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), uint16(500+k)), cfg)
		s.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
			if m.IsRequest() {
				_ = e.Reply(m, m.Data[:8])
			}
		}
		h.servers[k] = s
	}
	for i := range clients {
		c := h.net.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), 40000),
			core.Config{UnschedBytes: simUnsched, LinkMbps: 10_000, Resend: resendPatient})
		c.OnMessage = func(_ *sim.Endpoint, m *contract.Message) {
			if m.Err == nil {
				h.done++
			}
		}
		h.clients = append(h.clients, c)
	}
	return h
}

// send has client i send a request of n bytes to shard k.
func (h *shardedHost) send(t *testing.T, i, k, n int) {
	t.Helper()
	if _, err := h.clients[i].Send(h.servers[k].Addr(), make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
}

// run runs until want responses came, calling look after every event.
func (h *shardedHost) run(t *testing.T, want int, look func()) {
	t.Helper()
	if !h.net.RunUntil(func() bool { look(); return h.done >= want }, 5*time.Second) {
		t.Fatalf("%d of %d RPCs done", h.done, want)
	}
}

// grants returns shard k's grant scheduler's figures.
func (h *shardedHost) grants(k int) grant.Stats { return h.servers[k].Core.Stats().Grants }

// TestGrantBudgetBoundsShards: two shards each receiving long messages
// from two senders keep their incoming bytes together within one
// socket's budget, where each with its own budget would go past it.
func TestGrantBudgetBoundsShards(t *testing.T) {
	peak := func(budget *homa.GrantBudget) (incoming, limit int) {
		h := newShardedHost(budget, 4)
		for i := range 4 {
			h.send(t, i, i%2, 1_000_000)
		}
		h.run(t, 4, func() {
			a, b := h.grants(0), h.grants(1)
			incoming = max(incoming, a.Incoming+b.Incoming)
			limit = max(limit, a.Limit+b.Limit)
		})
		if budget != nil && budget.Lent() != 0 {
			t.Errorf("%d bytes still lent after every message arrived", budget.Lent())
		}
		return incoming, limit
	}
	// Unscheduled bytes are not the scheduler's to bound: each message
	// may add its own beyond it.
	bound := hostIncoming + 4*simUnsched
	incoming, limit := peak(homa.SplitIncoming(hostIncoming, 2))
	t.Logf("shared budget: peak incoming %d, peak limits %d", incoming, limit)
	if limit > hostIncoming || incoming > bound {
		t.Errorf("shards together: limits up to %d, incoming up to %d, past the socket's %d (+%d unscheduled)",
			limit, incoming, hostIncoming, bound-hostIncoming)
	}
	alone, _ := peak(nil)
	t.Logf("a budget each: peak incoming %d", alone)
	if alone <= bound {
		t.Errorf("without the shared budget the shards peaked at %d, within %d: this test shows nothing", alone, bound)
	}
}

// TestGrantBudgetLoneShard: a shard that alone has messages to grant
// borrows from the pool what its messages' windows take, and gives it
// back as their bytes arrive.
func TestGrantBudgetLoneShard(t *testing.T) {
	budget := homa.SplitIncoming(hostIncoming, 2)
	h := newShardedHost(budget, 3)
	for i := range 3 {
		h.send(t, i, 0, 1_000_000)
	}
	floor := hostIncoming / 4
	var limit, incoming int
	h.run(t, 3, func() {
		g := h.grants(0)
		limit, incoming = max(limit, g.Limit), max(incoming, g.Incoming)
	})
	t.Logf("lone shard: peak limit %d, peak incoming %d", limit, incoming)
	// Three messages, each granted a window of a quarter of the floor
	// and the pool, fill three quarters of it.
	if limit <= floor || limit > floor+hostIncoming/2 || incoming < (floor+hostIncoming/2)*3/4 {
		t.Errorf("a lone shard's limit peaked at %d and its incoming at %d; want past its floor %d, within %d, and incoming %d",
			limit, incoming, floor, floor+hostIncoming/2, (floor+hostIncoming/2)*3/4)
	}
	if got := h.grants(0).Limit; got != floor || budget.Lent() != 0 {
		t.Errorf("after the messages: limit %d, %d lent; want the floor %d and nothing", got, budget.Lent(), floor)
	}
	// The shard told the budget it has no message left to favour: the
	// other shard, with however long a message, is lent all of the pool.
	if got := budget.Shard(1).Settle(0, hostIncoming, 1<<30); got != hostIncoming/2 {
		t.Errorf("the other shard was lent %d of the free pool %d: the idle shard still counts as better", got, hostIncoming/2)
	}
}

// TestGrantBudgetLoss: over a network that loses and reorders packets,
// every message still arrives, the shards' bounds stay within the
// socket's budget, and the loans of bytes that were lost come back.
func TestGrantBudgetLoss(t *testing.T) {
	for seed := range uint64(4) {
		budget := homa.SplitIncoming(hostIncoming, 2)
		h := newShardedHostOn(sim.Config{Seed: seed, Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond, Loss: 0.05}, budget, 4)
		for i := range 8 {
			h.send(t, i%4, i%2, 300_000+i*50_000)
		}
		limit := 0
		h.run(t, 8, func() { limit = max(limit, h.grants(0).Limit+h.grants(1).Limit) })
		if limit > hostIncoming {
			t.Errorf("seed %d: the shards' bounds added up to %d, past %d", seed, limit, hostIncoming)
		}
		// The servers forget the RPCs once acknowledged; their loans
		// are back by then.
		h.net.RunUntil(func() bool { return budget.Lent() == 0 && h.grants(0).Active+h.grants(1).Active == 0 }, h.net.Now()+time.Second)
		if budget.Lent() != 0 {
			t.Errorf("seed %d: %d bytes still lent after every message arrived", seed, budget.Lent())
		}
	}
}

// recordingBudget is a shard's budget that notes the most it was asked
// to lend.
type recordingBudget struct {
	core.Budget
	maxWant int
}

func (r *recordingBudget) Settle(loan, want int, best uint32) int {
	r.maxWant = max(r.maxWant, want)
	return r.Budget.Settle(loan, want, best)
}

// TestGrantBudgetAsksWhatItUses: a shard asks the pool for what its
// grant pass would use beyond its floor, not for the whole pool, which
// it would hold through the pass while other shards find none: with
// windows of 20,000 bytes it never asks at all.
func TestGrantBudgetAsksWhatItUses(t *testing.T) {
	net := sim.New(sim.Config{Seed: 1, Delay: 5 * time.Microsecond})
	rb := &recordingBudget{Budget: homa.SplitIncoming(hostIncoming, 2).Shard(0)}
	srv := net.Listen(netip.MustParseAddrPort("10.0.0.1:500"), core.Config{
		UnschedBytes: simUnsched, Grant: grant.Config{MaxIncoming: hostIncoming, Window: 20_000}, Budget: rb})
	srv.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		if m.IsRequest() {
			_ = e.Reply(m, m.Data[:8])
		}
	}
	cli := net.Listen(netip.MustParseAddrPort("10.0.1.1:40000"), core.Config{UnschedBytes: simUnsched, LinkMbps: 10_000})
	done := false
	cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) { done = m.Err == nil }
	if _, err := cli.Send(srv.Addr(), make([]byte, 1_000_000), 0); err != nil {
		t.Fatal(err)
	}
	if !net.RunUntil(func() bool { return done }, time.Second) {
		t.Fatal("the RPC did not complete")
	}
	if rb.maxWant != 0 {
		t.Errorf("a shard whose messages' windows stay within its floor asked for %d bytes", rb.maxWant)
	}
}
