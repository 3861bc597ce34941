package core

import (
	"net/netip"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
)

// Cutoffs are a receiver's: it tells senders which priority each length
// of message gets for its unscheduled packets (CUTOFFS), and a sender
// whose DATA carry another version than the receiver's is told again,
// once per tick. Linux keeps one set per host, for all its sockets. A
// host may run several endpoints of this engine, though, each learning
// its own cutoffs from what it receives, with versions of its own: kept
// per host, the cutoffs of one port would be used for unscheduled
// packets to the others, whose every DATA would then carry a version
// they do not know, and each would answer with CUTOFFS every tick, for
// ever (four client sockets of one process, 1 KB stream messages: 791
// CUTOFFS for 6,216 RPCs). So the cutoffs a port of the host announces
// are kept for that port, for up to MaxPortCutoffs ports of a host, and
// the last announced by any port of the host serve the others.

// An Estimator learns the unscheduled priority cutoffs from the
// messages the core receives (priority.Estimator is the core's own). The
// shards of one socket share one (Config.Estimator), so that they learn
// from all of the socket's traffic, as one core would, rather than each
// from its share, N times slower, and announce the same cutoffs under
// the same versions. Record is called once per incoming message, under
// the core's caller's lock; Cutoffs at every DATA packet and grant pass:
// a shared Estimator answers it without a lock. Whatever it answers, the
// core's decisions follow from it alone.
type Estimator interface {
	// Record counts one incoming message (see priority.Estimator.Record).
	Record(length, unschedBytes uint32)
	// Cutoffs returns the cutoffs in force and the number of scheduled
	// levels (see priority.Estimator.Cutoffs).
	Cutoffs() (priority.Cutoffs, int)
}

// MaxPortCutoffs bounds the ports of one host whose cutoffs are kept:
// past it the oldest entry gives way, so a host cannot make a peer hold
// more (40 bytes an entry: with the default table of 16,384 peers, 5
// MiB at most). Ports past it flip between the cutoffs of the host's
// last announcer as before: a CUTOFFS a tick each, at worst.
const MaxPortCutoffs = 8

// portCutoffs are the cutoffs a port of a peer host announced.
type portCutoffs struct {
	port uint16
	cut  priority.Cutoffs
}

func (c *Core) handleCutoffs(h *wire.Cutoffs, src netip.Addr) {
	p := c.peers[src]
	if p == nil {
		c.drop(contract.DropUnknownRPC)
		return
	}
	cut := priority.Cutoffs{Values: h.Cutoffs, Version: h.Version}
	p.cutoffs = cut
	for i := range p.portCuts {
		if p.portCuts[i].port == h.SrcPort {
			p.portCuts[i].cut = cut
			return
		}
	}
	if len(p.portCuts) < MaxPortCutoffs {
		p.portCuts = append(p.portCuts, portCutoffs{port: h.SrcPort, cut: cut})
		return
	}
	p.portCuts[p.nextPortCut] = portCutoffs{port: h.SrcPort, cut: cut}
	p.nextPortCut = (p.nextPortCut + 1) % MaxPortCutoffs
}

// cutoffsFor returns the cutoffs for unscheduled packets to port of p.
func (p *peer) cutoffsFor(port uint16) *priority.Cutoffs {
	for i := range p.portCuts {
		if p.portCuts[i].port == port {
			return &p.portCuts[i].cut
		}
	}
	return &p.cutoffs
}
