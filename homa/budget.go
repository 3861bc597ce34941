package homa

import (
	"fmt"
	"sync/atomic"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/pacer"
)

// GrantBudget is one budget of incoming bytes shared by the cores of
// several endpoints: the shards of one socket, each granting its own
// messages, which together keep the bytes granted and not yet received
// within what one endpoint would allow. Each shard has a floor of its
// own, which it never waits for, and borrows beyond it from the
// budget's pool through one atomic counter, once per grant pass while
// it has messages needing grants, what the pass would grant (not the
// whole pool), and gives back what no byte in flight uses once the
// pass is done.
//
// The pool favours the shard closest to completing a message, as SRPT
// would across the socket: each shard publishes the remaining bytes of
// its best message needing grants, and a shard that some other shard
// beats may borrow at most half of what is free, leaving the rest for
// the better one. The same figures rank each shard's grant priorities
// among the others' (core.Budget.Ahead). A shard reads every other
// shard's figure when it borrows or ranks (N loads of cache lines the
// others write), which is cheap for the few shards of one host's cores.
type GrantBudget struct {
	floor int
	pool  int64
	used  atomic.Int64
	best  bests
}

// bests are the sharers' best messages: the bytes each has left, none
// for a sharer without one, each on a cache line of its own.
type bests []paddedBest

type paddedBest struct {
	v atomic.Uint32
	_ [60]byte
}

// none is the best of a sharer without a message: the pacer's
// NotWaiting, and the core's best when no message needs grants.
const none = pacer.NotWaiting

func newBests(n int) bests {
	b := make(bests, max(n, 1))
	for i := range b {
		b[i].v.Store(none)
	}
	return b
}

// ahead returns how many of the others' best messages go before best
// of sharer k (fewer bytes left; on a tie, a lower-numbered sharer),
// and how many others have one.
func (b bests) ahead(k int, best uint32) (ahead, active int) {
	for j := range b {
		if o := b[j].v.Load(); j != k && o != none {
			active++
			if o < best || o == best && j < k {
				ahead++
			}
		}
	}
	return ahead, active
}

// beaten reports whether another's best message goes before best of
// sharer k.
func (b bests) beaten(k int, best uint32) bool {
	for j := range b {
		if o := b[j].v.Load(); j != k && o != none && (o < best || o == best && j < k) {
			return true
		}
	}
	return false
}

// NewGrantBudget returns the budget of n shards, each with floor bytes
// of its own, lending up to pool bytes in all beyond the floors.
func NewGrantBudget(floor, pool, n int) *GrantBudget {
	return &GrantBudget{floor: max(floor, 1), pool: int64(max(pool, 0)), best: newBests(n)}
}

// SplitIncoming returns the budget that n shards share in place of one
// endpoint's total bytes granted and not yet received (its
// Grant.MaxIncoming): each has a floor of total/2n of its own, and
// borrows beyond it from a pool of the rest, so that one busy shard
// may use most of the total, and the shards together never more than
// all of it.
func SplitIncoming(total, n int) *GrantBudget {
	floor := max(total/(2*n), 1)
	return NewGrantBudget(floor, max(total-n*floor, 0), n)
}

// Shard returns the Budget of shard k, for its core's Config.Budget.
func (b *GrantBudget) Shard(k int) core.Budget {
	if k < 0 || k >= len(b.best) {
		panic(fmt.Sprintf("homa: shard %d of a grant budget of %d", k, len(b.best)))
	}
	return &shardBudget{b: b, k: k}
}

// Lent returns the bytes lent now, over all shards.
func (b *GrantBudget) Lent() int { return int(b.used.Load()) }

// shardBudget is one shard's view of a GrantBudget.
type shardBudget struct {
	b *GrantBudget
	k int
}

func (s *shardBudget) Floor() int { return s.b.floor }
func (s *shardBudget) Pool() int  { return int(s.b.pool) }

func (s *shardBudget) Settle(loan, want int, best uint32) int {
	b := s.b
	if mine := &b.best[s.k].v; mine.Load() != best {
		mine.Store(best)
	}
	if want <= loan {
		b.used.Add(int64(want - loan))
		return want
	}
	beaten := b.best.beaten(s.k, best)
	for {
		used := b.used.Load()
		free := b.pool - used
		if beaten {
			free /= 2
		}
		take := min(int64(want-loan), free)
		if take <= 0 {
			return loan
		}
		if b.used.CompareAndSwap(used, used+take) {
			return loan + int(take)
		}
	}
}

func (s *shardBudget) Ahead(remaining uint32) (ahead, active int) {
	return s.b.best.ahead(s.k, remaining)
}

// SharedLink is the account of transmit time of one link that the
// pacers of several endpoints share (the shards of one socket, sending
// through one NIC; core.Config.Link): when the link drains what was
// handed down to it, in the endpoints' clock, so they must share an
// origin (Config.Epoch), and what each sharer waits to send (see
// pacer.Link). Each endpoint's pacer orders its own messages; together
// they keep what waits in the NIC within one pacer's bound, the
// shortest waiting message first, as one endpoint would.
type SharedLink struct {
	busy atomic.Int64
	best bests // by sharer: the bytes left of what it waits to send
}

// NewSharedLink returns the account of a link that n pacers share.
func NewSharedLink(n int) *SharedLink { return &SharedLink{best: newBests(n)} }

// Shard returns sharer k's view of the link, for its core's Config.Link.
func (l *SharedLink) Shard(k int) pacer.Link {
	if k < 0 || k >= len(l.best) {
		panic(fmt.Sprintf("homa: sharer %d of a link of %d", k, len(l.best)))
	}
	return &linkShare{l: l, k: k}
}

// linkShare is one sharer's view of a SharedLink.
type linkShare struct {
	l *SharedLink
	k int
}

func (s *linkShare) Busy() int64 { return s.l.busy.Load() }

func (s *linkShare) Add(now, tx int64) int64 {
	for {
		b := s.l.busy.Load()
		if n := max(b, now) + tx; s.l.busy.CompareAndSwap(b, n) {
			return n
		}
	}
}

func (s *linkShare) Return(end, tx int64) { s.l.busy.CompareAndSwap(end, end-tx) }

func (s *linkShare) Wait(best uint32) { s.l.best[s.k].v.Store(best) }

func (s *linkShare) Beaten(best uint32) bool { return s.l.best.beaten(s.k, best) }
