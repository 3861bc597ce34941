// Package pacer orders and throttles a Homa endpoint's outgoing DATA.
//
// The draft asks two things of a sender. It MUST transmit by SRPT, packets
// of messages with fewer bytes left going first; and since NICs send in
// the order packets are queued, it MUST keep the queue below it short, or
// a short message's packet waits behind a long message's ones already
// handed down. A Pacer does both:
//
//   - Messages with sendable bytes wait in one queue, ordered by the bytes
//     left to send in the whole message (fewest first). Next names the
//     message whose packet should go now. A small share of the bytes (5%
//     by default) goes to the oldest ready message instead, so that a
//     long message cannot starve under a stream of shorter ones.
//   - Admit and Sent keep account of the transmit time handed to the
//     layers below: at the configured link rate, a packet may go when the
//     time still queued below, plus its own, stays within MaxQueue.
//     Control packets bypass the queue but are accounted with Sent, like
//     every other packet, so that the budget sees all output.
//
// An engine's transmit loop looks like:
//
//	for {
//		id, ok := p.Next()
//		if !ok {
//			break // nothing to send
//		}
//		n := wire size of id's next packet
//		if ok, wait := p.Admit(n, now); !ok {
//			arm the timer for now+wait; break
//		}
//		hand the packet to the NIC
//		p.Sent(n, now)
//		p.Update(id, bytes left) or p.Idle(id)
//	}
//
// A Pacer is pure: time is an argument (nanoseconds, from any fixed
// origin, never decreasing), it starts no goroutines, takes no locks (the
// engine calls it under its own) and, once its tables have grown to the
// largest number of messages queued at once, allocates nothing. Pacers
// that share a link (Config.Link) learn of each other's transmissions
// through it alone.
package pacer

import "time"

// Defaults for Config.
const (
	// DefaultMaxQueue is how much transmit time may wait below the pacer.
	// The draft finds 5 µs adequate for the Linux kernel, whose pacer
	// runs within a microsecond or two of when it should. A user-space
	// engine wakes from timers and system calls tens of microseconds
	// late, and hands packets down in batches; 20 µs keeps the link busy
	// through such a delay while a short message still waits at most
	// 20 µs behind data already handed down: 62 KB (about 40 full
	// packets) at 25 Gbit/s, 25 KB at 10 Gbit/s, 2.5 KB at 1 Gbit/s.
	DefaultMaxQueue = 20 * time.Microsecond
	// DefaultFIFOPerMille is the share of the contested bytes that go to
	// the oldest message (see Pacer.Next): 5%, the FIFO fraction the
	// draft suggests and Linux uses for grants.
	DefaultFIFOPerMille = 50
)

// Config tunes a Pacer.
type Config struct {
	// RateMbps is the rate at which the link drains, in Mbit/s, counting
	// every byte given to Sent (IP header included if the engine counts
	// it). Set it slightly below the real link rate (say 98%): a pacer
	// that errs on the fast side lets queues build below it. 0 (or
	// negative) means unlimited, as on loopback: Admit always says yes.
	RateMbps int
	// MaxQueue is how much transmit time, at RateMbps, may be handed down
	// and not yet drained. Zero or negative means DefaultMaxQueue.
	MaxQueue time.Duration
	// FIFOPerMille is the share, per mille, of the bytes sent through
	// Next that go to the oldest ready message while it is not also the
	// one with the fewest bytes left (see Pacer.Next). 0 means
	// DefaultFIFOPerMille (50); negative means none (pure SRPT); 1000 or
	// more means all (pure FIFO).
	FIFOPerMille int
	// Link, when set, keeps the account of transmit time handed below
	// for this Pacer and the others that share it (one NIC under several
	// endpoints): Admit counts what all of them handed down, Sent adds
	// to it. Each sharer picks its own packets in SRPT order; together
	// they keep the time queued below within MaxQueue, and the shortest
	// waiting message goes first (see Link). Nil: the Pacer's own
	// account. Ignored when RateMbps is unlimited.
	Link Link
	// LinkSlice is how much transmit time a Pacer takes from a shared
	// Link at once, spent packet by packet on its own account (see
	// Slices in Link). Zero means a quarter of MaxQueue (5 µs by
	// default); negative means none: each packet is added to the Link as
	// it goes. At most MaxQueue. Ignored without Link.
	LinkSlice time.Duration
}

// WithDefaults returns c with every unset field replaced by its default
// and out-of-range fields clamped: RateMbps to >= 0, FIFOPerMille to
// 0..1000 (0 then meaning none).
func (c Config) WithDefaults() Config {
	c.RateMbps = max(c.RateMbps, 0)
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	switch {
	case c.FIFOPerMille == 0:
		c.FIFOPerMille = DefaultFIFOPerMille
	case c.FIFOPerMille < 0:
		c.FIFOPerMille = 0
	}
	c.FIFOPerMille = min(c.FIFOPerMille, 1000)
	switch {
	case c.LinkSlice == 0:
		c.LinkSlice = c.MaxQueue / 4
	case c.LinkSlice < 0:
		c.LinkSlice = 0
	}
	c.LinkSlice = min(c.LinkSlice, c.MaxQueue)
	return c
}

// ID names a message to the Pacer. The engine chooses IDs; they must be
// unique among the messages queued at once.
type ID uint64

// Stats counts what a Pacer did. Its fields only grow, except Queued and
// QueuedBytes, which describe the queue now.
type Stats struct {
	Queued      int    // messages ready to send (Len)
	QueuedBytes uint64 // bytes left to send in the ready messages
	Picks       uint64 // Next calls that named a message
	FIFOPicks   uint64 // of which named the oldest message for the FIFO share
	Sends       uint64 // packets accounted by Sent
	SentBytes   uint64 // bytes accounted by Sent
	Throttled   uint64 // Admit calls that answered wait
	// On a shared Link, its words written: slices taken, packets added
	// one by one (beyond a slice, or with no slices), and slices given
	// back in part.
	Slices   uint64
	LinkAdds uint64
	Returns  uint64
}

// Pacer is the transmit queue and link budget of one endpoint. Create it
// with New.
type Pacer struct {
	cfg      Config
	rate     int64 // RateMbps: bits per microsecond
	maxQueue int64 // ns
	fifo     int64 // FIFOPerMille, 0..1000

	queue
	share  fifoShare
	link   budget
	shared Link // Config.Link, nil for the Pacer's own account (link)
	// waitBest is what this Pacer last told shared (Link.Wait), and
	// refusedSince when Admit began to refuse it without a break (-1:
	// it does not).
	waitBest     uint32
	refusedSince int64
	// slice is Config.LinkSlice (ns, 0 for none); sliceEnd when the link
	// drains the slice taken last, and sliceLeft what is not spent of it.
	slice     int64
	sliceEnd  int64
	sliceLeft int64

	stats Stats
}

// New returns an empty Pacer.
func New(cfg Config) *Pacer {
	cfg = cfg.WithDefaults()
	p := &Pacer{
		cfg:          cfg,
		rate:         int64(cfg.RateMbps),
		maxQueue:     cfg.MaxQueue.Nanoseconds(),
		fifo:         int64(cfg.FIFOPerMille),
		shared:       cfg.Link,
		waitBest:     NotWaiting,
		refusedSince: -1,
		slice:        cfg.LinkSlice.Nanoseconds(),
	}
	p.queue.init()
	return p
}

// Config returns the configuration in effect, defaults filled in.
func (p *Pacer) Config() Config { return p.cfg }

// Len returns the number of messages ready to send.
func (p *Pacer) Len() int { return len(p.srpt.s) }

// Stats returns the counters.
func (p *Pacer) Stats() Stats {
	s := p.stats
	s.Queued = p.Len()
	s.QueuedBytes = p.bytes
	return s
}
