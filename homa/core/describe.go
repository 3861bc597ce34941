package core

import (
	"fmt"
	"slices"
	"time"
)

// AppendDescription appends to b what the core holds for each of its RPCs, one line
// each, client RPCs first (oldest first), then server RPCs, at most
// limit lines in all: for finding out why an RPC neither completes nor
// fails. A line names the RPC (its local id and peer), its state, its
// outgoing and incoming messages (bytes sent or received, granted, and
// the length), whether the incoming one is in the grant scheduler or
// parked (out of it, waiting for memory or for its sender), whether the
// outgoing one waits in the pacer, when bytes last came in, how many
// RESENDs went unanswered, and when its timer is due (or that it has
// none, or waits for a RESEND turn). now is the caller's clock, as given
// to the core's other calls.
func (c *Core) AppendDescription(b []byte, now time.Duration, limit int) []byte {
	rs := make([]*rpc, 0, len(c.clients)+c.servers.len())
	for _, r := range c.clients {
		rs = append(rs, r)
	}
	clients := len(rs)
	slices.SortFunc(rs, func(a, b *rpc) int {
		if c := compare(a.start, b.start); c != 0 {
			return c
		}
		return compare(a.id, b.id) // started at once: in the order they were made
	})
	rs = append(rs, c.servers.all()...)
	slices.SortFunc(rs[clients:], func(a, b *rpc) int { return compare(a.id, b.id) })
	b = fmt.Appendf(b, "core: %d client RPCs, %d server RPCs, last called at tick %d, receive memory %d bytes, %d RESEND turns waiting\n",
		clients, len(rs)-clients, c.tick, c.mem, c.resends.peers.Len())
	for i, r := range rs {
		if i == limit {
			return fmt.Appendf(b, "  ... %d more\n", len(rs)-limit)
		}
		b = c.describe(b, r, now)
	}
	return b
}

// compare orders two ints or durations, as cmp.Compare would.
func compare[T ~int64 | ~uint64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

var stateNames = [...]string{stateActive: "active", stateServing: "serving", stateReplying: "replying"}

// describe appends r's line of AppendDescription to b.
func (c *Core) describe(b []byte, r *rpc, now time.Duration) []byte {
	side := "server"
	if r.isClient() {
		side = fmt.Sprintf("client, %v old,", now-r.start)
	}
	in := "in: nothing yet"
	if r.inInit {
		sched := "unscheduled"
		switch {
		case r.gid != 0:
			sched = "scheduled"
		case r.parked:
			sched = "parked"
		}
		in = fmt.Sprintf("in: %d/%d granted of %d, %s", r.in.received, r.in.granted, r.in.length, sched)
	}
	out := "out: none"
	if r.out.data != nil {
		out = fmt.Sprintf("out: %d/%d granted of %d", r.out.next, r.out.granted, r.out.length)
		if r.pid != 0 {
			out += ", paced"
		}
	}
	timer := "no timer"
	switch {
	case r.rq.Listed():
		timer = "waits for a RESEND turn"
	case r.timer.idx >= 0:
		timer = fmt.Sprintf("timer in %v", r.timer.at-now)
	}
	return fmt.Appendf(b, "  %s %d %v: %s; %s; %s; bytes last in at tick %d; %d RESENDs unanswered; %s\n",
		side, r.id, r.peerAddrPort(), stateNames[r.state], out, in, r.progressTick, r.rs.Unanswered(), timer)
}
