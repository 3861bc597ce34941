package core

import (
	"net/netip"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/pacer"
	"github.com/homa-go/homa/resend"
)

type rpcState uint8

const (
	// stateActive: a client RPC whose response is incomplete, or a server
	// RPC whose request is incomplete.
	stateActive rpcState = iota
	// stateServing: a server RPC whose request went to the application.
	stateServing
	// stateReplying: a server RPC sending (or holding, until it is
	// acknowledged) its response.
	stateReplying
)

// rpc is one RPC, client or server side.
type rpc struct {
	id   uint64 // local id: even on the client, odd on the server
	peer *peer
	port uint16 // the peer's Homa port
	// use is the client port's account within its host (server RPCs
	// only; see fair.go).
	use    *portUse
	cookie uint64
	state  rpcState
	out    outMsg // client: request; server: response
	in     inMsg  // client: response; server: request
	inInit bool   // in has seen its first DATA packet
	start  time.Duration

	rs resend.Tracker // loss detection while data is owed to us
	ak ack.Pending    // server: the answered RPC awaits its acknowledgment
	// replied is when the server answered; prompt says its client's host
	// acknowledged its last response promptly (see AwaitsAcks).
	replied time.Duration
	prompt  bool
	gid     grant.ID // the incoming message's handle in the grant scheduler (0: none)
	pid     pacer.ID // the outgoing message's handle in the pacer (0: none)

	// progressTick is the tick bytes of the incoming message last
	// arrived (or it started); parked means it lost its place in the
	// grant scheduler (silent sender, or memory) and waits to get it
	// back.
	progressTick uint64
	parked       bool
	// owedSince is the tick the sender last began to owe bytes: a GRANT
	// raised the limit while every byte granted before was here.
	owedSince uint64
	// incoming is set while r counts as a server RPC receiving its
	// request.
	incoming bool
	// unknownTick is when the client said RPC_UNKNOWN about this server
	// RPC (0: never): it is forgotten after a grace period unless the
	// client shows it still knows it.
	unknownTick uint64
	// grantProbe and resendProbe time the peer's round trip (see rtt.go).
	grantProbe, resendProbe probe
	// ask is the RESEND for a response that nothing has answered yet
	// (see backoff.go).
	ask ask

	timer timer
	// rq links the RPC into its peer's queue of RPCs waiting for a
	// RESEND slot (see resendq.go).
	rq links[rpc]
	// aq links the answered RPC into its peer's queue of RPCs waiting
	// for a NEED_ACK slot (see ackq.go).
	aq links[rpc]
	// lru links the RPC into its peer's list of RPCs receiving a message,
	// least recently active first (evictions take the front).
	lru links[rpc]
	// sameKey chains server RPCs whose keys collide in the servers table.
	sameKey *rpc
}

func (r *rpc) isClient() bool { return r.id&1 == 0 }

// owed reports whether r's peer owes it bytes: a response that has not
// begun, or granted bytes that have not arrived.
func (r *rpc) owed() bool { return !r.inInit || r.in.received < r.in.granted }

// grantDue is the tick r's sender loses its grant if no bytes arrive
// (see Limits.GrantTimeoutTicks).
func (r *rpc) grantDue() uint64 { return max(r.progressTick, r.owedSince) + r.peer.grantTimeout }

func (r *rpc) peerAddrPort() netip.AddrPort { return netip.AddrPortFrom(r.peer.addr, r.port) }

// serverKey names a server RPC: the client host and the client's id.
// Client ids are unique per host, so the port is checked, not keyed.
type serverKey struct {
	addr netip.Addr
	id   uint64
}

// newRPC returns a zeroed RPC from the core's free list.
func (c *Core) newRPC() *rpc {
	var r *rpc
	if n := len(c.freeRPCs); n > 0 {
		r = c.freeRPCs[n-1]
		c.freeRPCs[n-1] = nil
		c.freeRPCs = c.freeRPCs[:n-1]
		c.freeLow = min(c.freeLow, n-1)
	} else {
		r = new(rpc)
	}
	r.timer = timer{idx: -1, rpc: r}
	return r
}

// maxFreeRPCs bounds the recycled RPC structures kept.
const maxFreeRPCs = 1024

// recycle returns r, which is in no table, heap or list any more, to the
// free list after freeing its buffers.
func (c *Core) recycle(r *rpc) {
	c.releaseOut(&r.out)
	c.letGo(&r.in)
	c.charge(r, -r.in.release(c.bufs))
	c.releaseUse(r)
	segs := r.in.segs[:0] // keep the capacity
	*r = rpc{}
	r.in.segs = segs
	if len(c.freeRPCs) < maxFreeRPCs {
		c.freeRPCs = append(c.freeRPCs, r)
	}
}
