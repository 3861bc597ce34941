// Package priority chooses the network priorities of unscheduled Homa
// packets: the cutoffs a receiver hands to its senders, how a sender maps
// a message length to a priority with them, and when a receiver must
// send them again.
//
// A receiver owns one set of cutoffs, identified by a version. Senders
// keep the cutoffs and version each receiver last sent them (Default
// until then), put that version in every DATA packet, and send the
// unscheduled bytes of a message at Cutoffs.Priority(message length).
// When a DATA packet arrives with a version other than the receiver's
// own, the receiver sends a CUTOFFS packet, at most once per timer tick
// per peer (Stale).
//
// An Estimator learns a receiver's cutoffs from the messages it receives,
// following the draft: the eight levels are split between unscheduled
// and scheduled packets in proportion to the unscheduled share of
// incoming bytes (at least one level each, unscheduled levels highest),
// and the unscheduled cutoffs are placed so that each unscheduled level
// carries about the same number of bytes, shorter messages higher.
//
// Everything here is pure: no clock, no goroutines, no locking (the
// engine calls under its own lock) and no allocation after NewEstimator.
package priority

import "math"

// Levels is the number of network priorities: 0 (lowest) to Levels-1.
const Levels = 8

// MaxMessage is the largest message length Homa allows (Linux's limit).
// It is the cutoff of the lowest unscheduled level in every set of
// cutoffs this package produces, as it is in Default, so that every
// message of a legal length maps to an unscheduled level. The Estimator
// counts longer messages as MaxMessage long.
const MaxMessage = 1_000_000

// Cutoffs is a receiver's unscheduled cutoffs and their version: the
// payload of a CUTOFFS packet.
type Cutoffs struct {
	// Values holds, per priority, the largest message length whose
	// unscheduled packets may use it. Senders use the largest priority i
	// with Values[i] >= length. From the lowest unscheduled level up,
	// values are non-increasing in i, the lowest one at least the largest
	// message length; the entries of the scheduled levels below are 0 in
	// Linux's form (and here), the largest message length in the draft's.
	Values [Levels]uint32
	// Version identifies this set of cutoffs. Senders echo it in the
	// cutoff version field of their DATA packets.
	Version uint16
}

// Default is the set of cutoffs of the Linux implementation, version 1:
// priority 7 for messages up to 200 bytes, 6 up to 2,800, 5 up to
// 15,000, 4 up to MaxMessage; 0..3 are for scheduled data. Senders use it
// for a receiver that has not sent its own, and an Estimator reports it
// until it has seen enough traffic.
var Default = Cutoffs{
	Values:  [Levels]uint32{0, 0, 0, 0, MaxMessage, 15_000, 2_800, 200},
	Version: 1,
}

// Priority returns the priority for unscheduled packets of a message of
// the given length: the largest i with Values[i] >= length, or 0 when
// there is none (a length beyond every cutoff). It is defined for any
// Values, including ones a hostile peer sent that are not monotonic.
func (c *Cutoffs) Priority(length uint32) uint8 {
	for i := Levels - 1; i > 0; i-- {
		if c.Values[i] >= length {
			return uint8(i)
		}
	}
	return 0
}

// NeverSent is the lastSentTick to give Stale for a peer that has never
// been sent a CUTOFFS packet: no real tick equals it.
const NeverSent uint64 = math.MaxUint64

// Stale reports whether a receiver whose cutoffs have version ourVersion
// should send a CUTOFFS packet to a peer whose DATA packet carried
// peerVersion, at tick now, when it last sent that peer a CUTOFFS packet
// at lastSentTick (NeverSent if never): the versions differ and none was
// sent to the peer during this tick. After sending, the engine records
// now as the peer's lastSentTick.
func Stale(ourVersion, peerVersion uint16, lastSentTick, now uint64) bool {
	return ourVersion != peerVersion && lastSentTick != now
}
