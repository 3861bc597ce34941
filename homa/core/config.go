package core

import (
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"
)

// MaxMessage is the largest message Homa carries.
const MaxMessage = wire.MaxMessageLength

// Config tunes a Core. The zero value of every field means the default,
// which follows the Linux implementation where it has one.
type Config struct {
	// UnschedBytes is how many initial bytes of a message are sent
	// without waiting for grants. Default 40,000.
	UnschedBytes int
	// Grant configures the receiver's SRPT grant scheduler (overcommit,
	// total incoming limit, window, FIFO share, scheduled priorities).
	Grant grant.Config
	// LinkMbps, when positive, paces outgoing DATA to this rate in SRPT
	// order (see package pacer). Zero sends at once.
	LinkMbps int
	// Cutoffs configures how the core learns the unscheduled priority
	// cutoffs it tells its senders.
	Cutoffs priority.EstimatorConfig

	// Tick is the unit of time of Resend and Ack, and the granularity
	// of the core's timers. Default 1 ms, as Linux.
	Tick time.Duration
	// Resend times loss recovery: RESEND after ResendTicks without
	// progress, every ResendInterval ticks; an RPC whose peer sent
	// nothing about it through TimeoutResends RESENDs ends (defaults
	// 5, 5, 20). These are floors: toward a peer whose measured round
	// trip is longer, the delay and interval stretch to it (see
	// resend.RTT).
	Resend resend.Config
	// Ack times acknowledgments on the server: NEED_ACK RequestAckTicks
	// after the response is sent, then every NeedAckInterval ticks, and
	// the RPC is forgotten after ReclaimTicks without word from the
	// client (defaults 2, 1, 2000; floors, stretched like Resend).
	Ack ack.Config

	// Limits bound what peers can make the core hold.
	Limits Limits
}

// Limits bound every resource a peer can make the core hold. Each has a
// global bound and a share per peer host, so that one host cannot take
// what others need: when a bound is reached, the core sheds the work of
// the host (and, within it, of the client port) holding the most, and
// only refuses a newcomer when it is itself the heaviest. Zero means the
// default.
type Limits struct {
	// RecvMemory bounds the payload bytes of incoming messages: those
	// arriving, and complete requests the application has not taken yet.
	// Memory is committed as bytes arrive (at most four times what a
	// message has brought, times the rounding of the buffer pool's size
	// classes, which is below two), never from the length a sender
	// claims, and
	// grants are given only while it lasts.
	// Default 64 MiB.
	RecvMemory int
	// RecvMemoryPerPeer bounds one host's share. Default RecvMemory/4.
	RecvMemoryPerPeer int
	// IncomingRPCs bounds the server RPCs whose request is still
	// arriving. Default 10,000.
	IncomingRPCs int
	// IncomingRPCsPerPeer bounds one host's share. Default 2,000.
	IncomingRPCsPerPeer int
	// PendingReplies bounds the server RPCs whose request is complete
	// and not yet answered by the application. Requests beyond it wait
	// (their senders retry). Default 10,000.
	PendingReplies int
	// PendingRepliesPerPeer bounds one host's share. Default 2,000.
	PendingRepliesPerPeer int
	// Peers bounds the peer table; hosts with no RPC are evicted, least
	// recently used first, to make room. Default 16,384.
	Peers int
	// GrantTimeoutTicks is how long (in ticks) an incoming message may
	// leave granted bytes unsent before it loses its grant, so that
	// silent senders cannot hold the incoming budget. It gets it back
	// when bytes arrive again. Default ResendTicks + ResendInterval;
	// like them, it stretches toward a peer with a longer round trip.
	GrantTimeoutTicks int
	// ResendsPerTick bounds the RESENDs the core sends per tick, to all
	// peers (each peer gets at most one per tick): a RESEND costs a
	// packet, and forged first packets from many addresses would
	// otherwise have the core spend its CPU asking silent hosts again.
	// RPCs over the budget wait for their turn, peers served in turn.
	// Default 16 (16,000 a second at 1 ms ticks).
	ResendsPerTick int
}

// Defaults.
const (
	defaultUnschedBytes   = 40_000
	defaultTick           = time.Millisecond
	defaultRecvMemory     = 64 << 20
	defaultIncomingRPCs   = 10_000
	defaultPerPeerRPCs    = 2_000
	defaultPendingReplies = 10_000
	defaultPeers          = 16_384
	defaultResendsPerTick = 16
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.UnschedBytes <= 0 {
		c.UnschedBytes = defaultUnschedBytes
	}
	c.UnschedBytes = min(c.UnschedBytes, MaxMessage)
	c.Grant = c.Grant.WithDefaults()
	if c.Tick <= 0 {
		c.Tick = defaultTick
	}
	c.Resend = c.Resend.WithDefaults()
	c.Ack = c.Ack.WithDefaults()
	l := &c.Limits
	if l.RecvMemory <= 0 {
		l.RecvMemory = defaultRecvMemory
	}
	// Room for one message of the largest size beside what the grant
	// scheduler may have outstanding, so that any message can complete.
	l.RecvMemory = max(l.RecvMemory, MaxMessage+c.Grant.MaxIncoming)
	if l.RecvMemoryPerPeer <= 0 {
		l.RecvMemoryPerPeer = l.RecvMemory / 4
	}
	l.RecvMemoryPerPeer = min(max(l.RecvMemoryPerPeer, MaxMessage+c.Grant.MaxIncoming), l.RecvMemory)
	if l.IncomingRPCs <= 0 {
		l.IncomingRPCs = defaultIncomingRPCs
	}
	if l.IncomingRPCsPerPeer <= 0 {
		l.IncomingRPCsPerPeer = defaultPerPeerRPCs
	}
	l.IncomingRPCsPerPeer = min(l.IncomingRPCsPerPeer, l.IncomingRPCs)
	if l.PendingReplies <= 0 {
		l.PendingReplies = defaultPendingReplies
	}
	if l.PendingRepliesPerPeer <= 0 {
		l.PendingRepliesPerPeer = defaultPerPeerRPCs
	}
	l.PendingRepliesPerPeer = min(l.PendingRepliesPerPeer, l.PendingReplies)
	if l.Peers <= 0 {
		l.Peers = defaultPeers
	}
	if l.ResendsPerTick <= 0 {
		l.ResendsPerTick = defaultResendsPerTick
	}
	if l.GrantTimeoutTicks <= 0 {
		l.GrantTimeoutTicks = c.Resend.ResendTicks + c.Resend.ResendInterval
	}
	return c
}
