package priority_test

import (
	"fmt"

	"github.com/homa-go/homa/priority"
)

// The receiver learns cutoffs from its incoming messages and answers a
// DATA packet carrying another version with CUTOFFS; the sender then uses
// them for the unscheduled packets it sends to that receiver.
func Example() {
	// Receiver: record each incoming message once.
	est := priority.NewEstimator(priority.EstimatorConfig{MinMessages: 300})
	for range 100 {
		est.Record(100, 100)        // short requests, all unscheduled
		est.Record(5_000, 5_000)    // medium ones
		est.Record(200_000, 40_000) // long ones: 40,000 unscheduled bytes
	}
	ours, sched := est.Cutoffs()
	fmt.Println("scheduled levels:", sched)

	// A DATA packet from a peer still on version 1 arrives at tick 7.
	lastSent := priority.NeverSent
	if priority.Stale(ours.Version, 1, lastSent, 7) {
		lastSent = 7
		fmt.Println("send CUTOFFS", ours.Values, "version", ours.Version)
	}
	fmt.Println("again this tick:", priority.Stale(ours.Version, 1, lastSent, 7))

	// Sender: Default until the CUTOFFS arrives, then the receiver's.
	peer := priority.Default
	fmt.Println("before:", peer.Priority(100), peer.Priority(5_000), peer.Priority(200_000))
	peer = ours
	fmt.Println("after:", peer.Priority(100), peer.Priority(5_000), peer.Priority(200_000))
	// Output:
	// scheduled levels: 6
	// send CUTOFFS [0 0 0 0 0 0 1000000 5055] version 2
	// again this tick: false
	// before: 7 5 4
	// after: 7 7 6
}
