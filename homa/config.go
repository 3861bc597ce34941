package homa

import (
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/grant"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/priority"
	"github.com/homa-go/homa/resend"
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
	// PollDuration is the longest a goroutine waiting in Recv spins on
	// the socket after the last packet before it parks in the netpoller.
	// Default 50 µs, Linux Homa's poll time; negative never spins.
	PollDuration time.Duration
	// Polling says whether to spin: PollAlways (the default) spins for
	// PollDuration after each packet, PollAdaptive spins on servers only
	// while spinning pays, PollNever parks at once.
	Polling Polling

	// Tick is the unit of Resend and Ack, and the granularity of the
	// endpoint's timers (there is no periodic tick: an idle endpoint
	// does not wake up). Default 1 ms, as Linux.
	Tick time.Duration
	// Resend times loss recovery: RESEND after ResendTicks without
	// progress, every ResendInterval ticks; an RPC whose peer says
	// nothing about it through TimeoutResends RESENDs ends (defaults 5,
	// 5, 20).
	Resend resend.Config
	// Ack times acknowledgments on the server: NEED_ACK RequestAckTicks
	// after the response is sent, then every NeedAckInterval ticks, and
	// the RPC is forgotten after ReclaimTicks without word from the
	// client (defaults 2, 1, 2000).
	Ack ack.Config
	// Limits bound what peers can make the endpoint hold: receive
	// memory, server RPCs, peers (see core.Limits for the defaults and
	// what happens at a limit).
	Limits contract.Limits
}

// Defaults of the shell.
const (
	defaultPollDuration = 50 * time.Microsecond
)

func (c Config) withDefaults() Config {
	if c.PollDuration == 0 {
		c.PollDuration = defaultPollDuration
	}
	return c
}

// coreConfig is the protocol part of c.
func (c Config) coreConfig() core.Config {
	return core.Config{
		UnschedBytes: c.UnschedBytes,
		Grant:        c.Grant,
		LinkMbps:     c.LinkMbps,
		Cutoffs:      c.Cutoffs,
		Tick:         c.Tick,
		Resend:       c.Resend,
		Ack:          c.Ack,
		Limits:       c.Limits,
	}
}
