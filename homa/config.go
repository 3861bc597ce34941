package homa

import (
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"

	"github.com/homa-go/homa/homa/wire"
)

// Config tunes an Endpoint. The zero value of every field means the
// default, which follows the Linux implementation where it has one.
type Config struct {
	// UnschedBytes is how many initial bytes of a message are sent without
	// waiting for grants. Default 40,000.
	UnschedBytes int
	// Grant configures the receiver's SRPT grant scheduler (overcommit,
	// total incoming limit, window, FIFO share, scheduled priorities).
	Grant grant.Config
	// LinkMbps, when positive, paces outgoing packets to this rate: DATA
	// waits in one queue, fewest remaining bytes first (with a small share
	// for the oldest message), so that no more than a few microseconds of
	// data sit in the queues below us and a short message never waits
	// behind a long one there. Set it slightly below the link's real
	// rate. Zero (the default, right for loopback) sends at once.
	LinkMbps int
	// Cutoffs configures how this endpoint learns the unscheduled
	// priority cutoffs it tells its senders (Linux defaults until enough
	// traffic is seen).
	Cutoffs priority.EstimatorConfig
	// MaxPacket, when positive, caps the size of every Homa packet
	// (header included), overriding the path MTU the Conn reports.
	MaxPacket int
	// PollDuration is how long the receive loop busy-polls the socket for
	// more packets before parking. Default 50 µs; negative disables polling.
	PollDuration time.Duration
	// MaxServerRPCs bounds the server RPCs one endpoint holds at once;
	// requests beyond it are dropped and counted. Default 10,000.
	MaxServerRPCs int
	// MaxServerRPCsPerPeer bounds the server RPCs from one client host.
	// Default 2,000.
	MaxServerRPCsPerPeer int
	// MaxPeers bounds the hosts a server learns of from incoming
	// requests (source addresses can be forged). Default 100,000.
	MaxPeers int

	// Tick is the period of the endpoint's timer, the unit of Resend and
	// Ack. Default 1 ms, as Linux.
	Tick time.Duration
	// Resend times loss recovery: RESEND after ResendTicks without
	// progress, every ResendInterval ticks, and the peer is declared dead
	// after TimeoutResends unanswered RESENDs (defaults 5, 5, 20).
	Resend resend.Config
	// Ack times acknowledgments on the server: NEED_ACK RequestAckTicks
	// after the response is sent, then every NeedAckInterval ticks, and
	// the RPC is forgotten after ReclaimTicks without word from the
	// client (defaults 2, 1, 2000).
	Ack ack.Config
}

// Defaults of the Linux implementation.
const (
	defaultUnschedBytes  = 40_000
	defaultPollDuration  = 50 * time.Microsecond
	defaultMaxServerRPCs = 10_000
	defaultMaxPerPeer    = 2_000
	defaultMaxPeers      = 100_000
	defaultTick          = time.Millisecond
	// MaxMessage is the largest message Homa carries.
	MaxMessage = wire.MaxMessageLength
)

func (c Config) withDefaults() Config {
	if c.UnschedBytes <= 0 {
		c.UnschedBytes = defaultUnschedBytes
	}
	c.Grant = c.Grant.WithDefaults()
	if c.PollDuration == 0 {
		c.PollDuration = defaultPollDuration
	}
	if c.MaxServerRPCs <= 0 {
		c.MaxServerRPCs = defaultMaxServerRPCs
	}
	if c.MaxServerRPCsPerPeer <= 0 {
		c.MaxServerRPCsPerPeer = defaultMaxPerPeer
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = defaultMaxPeers
	}
	if c.Tick <= 0 {
		c.Tick = defaultTick
	}
	c.Resend = c.Resend.WithDefaults()
	c.Ack = c.Ack.WithDefaults()
	return c
}
