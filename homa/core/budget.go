package core

import "math"

// A Budget bounds a core's incoming bytes (granted and not yet received)
// by a floor of its own and what it lends beyond it, out of a budget
// several cores share: the shards of one socket, which together should
// have no more incoming than one core with their Grant.MaxIncoming
// would. Each shard's messages keep the windows Grant.MaxIncoming gives
// them, as far as its bound allows. The core settles its loan once per grant
// pass, and only while a message needs grants or it holds a loan, so a
// Budget shared between goroutines (through atomics) costs a few atomic
// operations per batch of packets, never a lock on the path. Whatever
// the Budget answers, the core's decisions follow from it alone: the
// core stays deterministic for a given sequence of answers.
type Budget interface {
	// Settle moves the core's loan from loan toward want and returns
	// the new loan. A want below loan gives bytes back, which always
	// succeeds; above it asks for more, lent as far as the budget has
	// them (never more than want). best is the remaining bytes of the
	// core's best-ranked message needing grants, math.MaxUint32 when it
	// has none: a lender may favour the core closest to completing one.
	Settle(loan, want int, best uint32) int
	// Floor is the incoming bytes the core may have without a loan,
	// and Pool the most the Budget lends it.
	Floor() int
	Pool() int
	// Ahead returns how many of the other cores' best messages needing
	// grants (as they last told Settle) rank before a message of this
	// core with remaining bytes left, and how many other cores have
	// one: the core's grant priorities count them (grant.SetAhead).
	Ahead(remaining uint32) (ahead, active int)
}

// noBest is the best remaining bytes of a core with no message needing
// grants.
const noBest = math.MaxUint32

// borrowIncoming raises (or lowers) the scheduler's bound before a grant
// pass to what the pass would use, as far as the budget lends it, when
// a message needs grants. A core whose last
// such message went tells the budget, which else would go on favouring
// it.
func (c *Core) borrowIncoming() {
	best, ok := c.sched.Best()
	switch {
	case ok:
		// What the pass would grant beyond the floor, and no more: a
		// shard holding the whole pool through its pass would leave
		// none to the others passing meanwhile.
		want := min(max(c.sched.Demand()-c.cfg.Budget.Floor(), 0), c.cfg.Budget.Pool())
		c.settleIncoming(want, best)
	case c.incomingBest != noBest:
		c.settleIncoming(c.incomingLoan, noBest)
	}
}

// repayIncoming gives back, after a grant pass, the part of the loan
// that no granted byte still in flight uses.
func (c *Core) repayIncoming() {
	need := max(0, c.sched.Incoming()-c.cfg.Budget.Floor())
	if need >= c.incomingLoan {
		return
	}
	best, ok := c.sched.Best()
	if !ok {
		best = noBest
	}
	c.settleIncoming(need, best)
}

// returnIncoming gives the whole loan back: the core is closing.
func (c *Core) returnIncoming() {
	if c.cfg.Budget != nil {
		c.settleIncoming(0, noBest)
	}
}

// settleIncoming settles the loan toward want, telling the budget the
// core's best, and bounds the scheduler by the loan.
func (c *Core) settleIncoming(want int, best uint32) {
	loan := c.cfg.Budget.Settle(c.incomingLoan, want, best)
	c.incomingBest = best
	if loan != c.incomingLoan {
		c.incomingLoan = loan
		c.sched.SetLimit(c.cfg.Budget.Floor() + loan)
	}
}
