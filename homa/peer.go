package homa

import (
	"net/netip"

	"github.com/homa-go/homa/homa/wire"
)

// defaultCutoffs are the unscheduled cutoffs of the Linux implementation,
// used for a peer until it sends its own: priority 7 for messages up to
// 200 bytes, 6 up to 2,800, 5 up to 15,000, 4 for the rest.
var defaultCutoffs = [wire.NumPriorities]uint32{0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200}

// peer is what an endpoint knows about another host.
type peer struct {
	addr       netip.Addr
	maxPayload int // data bytes per DATA packet to this host

	cutoffs       [wire.NumPriorities]uint32
	cutoffVersion uint16

	// acks are completed client RPCs to this host whose acknowledgment
	// has not been sent yet; one rides in each DATA header.
	acks      []wire.AckEntry
	acksSince uint64 // tick when acks last went from empty to pending

	serverRPCs int    // server RPCs from this host
	heard      uint64 // tick of the last valid packet from this host
	dead       uint64 // tick of the last timeout (0: never)
}

// unschedPriority is the priority of unscheduled packets of a message of
// the given length: the largest i with cutoffs[i] >= length.
func (p *peer) unschedPriority(length uint32) uint8 {
	for i := wire.NumPriorities - 1; i > 0; i-- {
		if p.cutoffs[i] >= length {
			return uint8(i)
		}
	}
	return 0
}

// maxPendingAcks bounds the acknowledgments kept per peer; past it the
// oldest is forgotten (acknowledgments are not reliable anyway: servers
// ask again with NEED_ACK).
const maxPendingAcks = 64

// addAck records a completed client RPC to acknowledge, and returns how
// many are now pending for that server port.
func (p *peer) addAck(a wire.AckEntry, now uint64) int {
	if len(p.acks) == 0 {
		p.acksSince = now
	}
	if len(p.acks) == maxPendingAcks {
		copy(p.acks, p.acks[1:])
		p.acks = p.acks[:maxPendingAcks-1]
	}
	p.acks = append(p.acks, a)
	n := 0
	for _, x := range p.acks {
		if x.ServerPort == a.ServerPort {
			n++
		}
	}
	return n
}

// takeAck removes one pending acknowledgment for the server port, if any.
// Only acks for the packet's own destination port are piggybacked: each
// port may be served by another process, which sees only its own packets.
func (p *peer) takeAck(port uint16) wire.AckEntry {
	for i := len(p.acks) - 1; i >= 0; i-- {
		if a := p.acks[i]; a.ServerPort == port {
			p.acks = append(p.acks[:i], p.acks[i+1:]...)
			return a
		}
	}
	return wire.AckEntry{}
}

// takeAcks removes up to len(dst) pending acknowledgments for the port
// into dst and returns how many.
func (p *peer) takeAcks(port uint16, dst []wire.AckEntry) int {
	n := 0
	for n < len(dst) {
		a := p.takeAck(port)
		if a.ClientID == 0 {
			break
		}
		dst[n] = a
		n++
	}
	return n
}
