package core

// What load leaves behind. A burst of RPCs grows the core's recycled
// RPC structures (each with the segment list of the largest message it
// received), its tables (Go maps keep the room of their peak) and its
// scratch slices; none of it shrinks by itself. Trim, which the shell
// calls from its timer about once a second while there is something to
// give back, lets go of what the interval since the last Trim did not
// need: the recycled structures never taken in it (the fewest the free
// list held, its low-water mark), the room of a table that holds an
// eighth of its peak or less, and scratch grown past scratchKeep. Steady
// load keeps what it uses; an idle core has given everything back after
// two calls. Nothing here is on the path of a packet: the free list's
// low-water mark is one comparison when an RPC starts.

// scratchKeep is the most entries a scratch slice keeps through a Trim.
const scratchKeep = 256

// peaks are the most entries each table held at a Trim since it was
// last rebuilt.
type peaks struct {
	clients, servers, peers, granting, pacing, solicited int
}

// Trim lets go of what the core holds for load that has stopped (see
// above) and reports whether it still keeps recycled structures, which a
// later Trim may let go of.
func (c *Core) Trim() bool {
	if c.closed {
		return false
	}
	if n := min(c.freeLow, len(c.freeRPCs)); n > 0 {
		// The free list is a stack: its bottom is least recently used.
		k := copy(c.freeRPCs, c.freeRPCs[n:])
		clear(c.freeRPCs[k:])
		c.freeRPCs = c.freeRPCs[:k]
	}
	dropScratch(&c.freeRPCs)
	c.freeLow = len(c.freeRPCs)
	p := &c.peaks
	c.clients, p.clients = shrinkMap(c.clients, p.clients)
	c.servers.m, p.servers = shrinkMap(c.servers.m, p.servers)
	c.peers, p.peers = shrinkMap(c.peers, p.peers)
	c.granting, p.granting = shrinkMap(c.granting, p.granting)
	c.solicited, p.solicited = shrinkMap(c.solicited, p.solicited)
	if c.pacing != nil {
		c.pacing, p.pacing = shrinkMap(c.pacing, p.pacing)
	}
	t := &c.tx
	dropScratch(&t.keys)
	dropScratch(&t.ranks)
	dropScratch(&t.msgs)
	dropScratch(&t.tmp)
	dropScratch(&c.rxRanks)
	dropScratch(&c.rxMsgs)
	return len(c.freeRPCs) > 0
}

// dropScratch lets an empty slice's storage go if it grew past
// scratchKeep entries.
func dropScratch[T any](s *[]T) {
	if len(*s) == 0 && cap(*s) > scratchKeep {
		*s = nil
	}
}
