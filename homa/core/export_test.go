package core

import "net/netip"

// Unwatched lists the RPCs (client and server ids) that lost their place
// in the grant scheduler with nothing to give it back: parked, with no
// timer set and not waiting for a RESEND turn. Only a DATA packet could
// unpark such an RPC, and its sender, having sent every byte granted,
// sends none.
func (c *Core) Unwatched() []uint64 {
	var ids []uint64
	check := func(r *rpc) {
		if r.parked && r.timer.idx < 0 && !r.rq.Listed() {
			ids = append(ids, r.id)
		}
	}
	for _, r := range c.clients {
		check(r)
	}
	for _, r := range c.servers.all() {
		check(r)
	}
	return ids
}

// Refusals reports the refused requests the core remembers (recall.go),
// in all and from the host at addr, and the room reserved.
func (c *Core) Refusals(addr netip.Addr) (all, host, reserved int) {
	if p := c.peers[addr]; p != nil {
		host = len(p.recalls)
	}
	return c.rc.refusals, host, c.rc.reserved
}
