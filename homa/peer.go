package homa

import (
	"net/netip"

	"github.com/homa-go/homa/priority"

	"github.com/homa-go/homa/homa/wire"
)

// peer is what an endpoint knows about another host.
type peer struct {
	addr       netip.Addr
	maxPayload int // data bytes per DATA packet to this host

	// cutoffs are the peer's, for our unscheduled packets to it (Linux
	// defaults until it sends CUTOFFS); cutoffsSent is the tick we last
	// sent it ours.
	cutoffs     priority.Cutoffs
	cutoffsSent uint64

	// acks are completed client RPCs to this host whose acknowledgment
	// has not been sent yet; one rides in each DATA header.
	acks      []wire.AckEntry
	acksSince uint64 // tick when acks last went from empty to pending

	serverRPCs int    // server RPCs from this host
	heard      uint64 // tick of the last valid packet from this host
	dead       uint64 // tick of the last timeout (0: never)

	// resendsUnheard counts RESENDs sent to the host since it was last
	// heard from.
	resendsUnheard int
	// resendRPC is this tick's candidate for the peer's one RESEND, due
	// since resendDue; needAcks counts the NEED_ACKs sent at needAckTick.
	resendRPC   *rpc
	resendDue   uint64
	needAcks    int
	needAckTick uint64
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
