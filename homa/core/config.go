package core

import (
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/pacer"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"
)

// Config tunes a Core. The zero value of every field means the default,
// which follows the Linux implementation where it has one.
type Config struct {
	// UnschedBytes is how many initial bytes of a message are sent
	// without waiting for grants. Default 40,000, and 128 KiB to a
	// loopback peer (127.0.0.0/8, ::1): about a round trip at the link's
	// rate is right, and on loopback the link is a copy in memory,
	// which moves 40 KB in a few microseconds, less than the round trip
	// a grant takes (a 41,000-byte echo took twice as long as a 40,000-
	// byte one, its grants its only difference).
	UnschedBytes int
	// Grant configures the receiver's SRPT grant scheduler (overcommit,
	// total incoming limit, window, FIFO share, scheduled priorities).
	Grant grant.Config
	// LinkMbps, when positive, paces outgoing DATA to this rate in SRPT
	// order (see package pacer). Zero sends at once.
	LinkMbps int
	// Link, when set with LinkMbps, is the account of transmit time the
	// core's pacer shares with the other cores sending through the same
	// link (the shards of one socket; see pacer.Config.Link), in the
	// core's clock, which they must share.
	Link pacer.Link
	// Cutoffs configures how the core learns the unscheduled priority
	// cutoffs it tells its senders.
	Cutoffs priority.EstimatorConfig
	// Estimator, when set, learns the cutoffs in the core's stead: one
	// shared by several cores (the shards of one socket; see
	// Estimator). Nil: a priority.Estimator of Cutoffs, the core's own.
	Estimator Estimator

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
	Limits contract.Limits

	// Budget, when set, bounds the grant scheduler's incoming bytes by
	// a floor and what it lends out of a budget shared with other cores
	// (the shards of one socket; see Budget), within Grant.MaxIncoming.
	// Nil: Grant.MaxIncoming alone.
	Budget Budget
}

// Defaults.
const (
	defaultUnschedBytes   = 40_000
	loopbackUnschedBytes  = 128 << 10
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
	c.UnschedBytes = min(c.UnschedBytes, contract.MaxMessage)
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
	floor := messagePeak(contract.MaxMessage) + c.Grant.MaxIncoming
	l.RecvMemory = max(l.RecvMemory, floor)
	if l.RecvMemoryPerPeer <= 0 {
		l.RecvMemoryPerPeer = l.RecvMemory / 4
	}
	l.RecvMemoryPerPeer = min(max(l.RecvMemoryPerPeer, floor), l.RecvMemory)
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
