package dcsim

import (
	"testing"
	"time"
)

// TestHomaShards runs hosts whose sockets are 8 shards: sharing one
// incoming budget and one paced link, they keep the queues at their
// NICs and at their top-of-rack downlinks, and the tail of the
// slowdowns, what one core a host keeps them; sharing nothing, each
// shard's pacer and grants act as if it had the host alone, and the
// queues grow several-fold.
func TestHomaShards(t *testing.T) {
	cfg := Config{Racks: 2, HostsPerRack: 8, Spines: 2, Workload: "w4", Load: 0.8, Duration: 2 * time.Millisecond, Seed: 3}
	run := func(shards int, nothing bool) *Result {
		c := cfg
		c.Shards, c.ShardsShareNothing = shards, nothing
		r, err := Run(c, "homa")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d messages (%d incomplete), p99 %.2f (shortest 20%%: %.2f); NIC queue peak %d, ToR downlink peak %d, %d drops",
			r.Label, r.Messages, r.Incomplete, r.P99, r.ShortP99, r.Layers["nic"].PeakQ, r.Layers["tor-down"].PeakQ, r.Drops)
		if r.Failed != 0 || r.Messages < 100 {
			t.Errorf("%s: %d messages, %d failed RPCs", r.Label, r.Messages, r.Failed)
		}
		return r
	}
	one, shared, nothing := run(1, false), run(8, false), run(8, true)
	nic := func(r *Result) int { return r.Layers["nic"].PeakQ }
	tor := func(r *Result) int { return r.Layers["tor-down"].PeakQ }
	if nic(shared) > 2*nic(one) || tor(shared) > tor(one)*3/2 || shared.Drops != 0 {
		t.Errorf("shards sharing budget and link: NIC peak %d, ToR downlink peak %d, %d drops; one core a host: %d, %d",
			nic(shared), tor(shared), shared.Drops, nic(one), tor(one))
	}
	// Ranked among the other shards' messages, each shard's grants
	// keep the priorities one core's would have.
	if shared.P99 > one.P99*5/4 {
		t.Errorf("shards sharing budget and link: p99 slowdown %.2f, one core a host %.2f", shared.P99, one.P99)
	}
	if nic(nothing) < 4*nic(shared) || tor(nothing) <= tor(shared) {
		t.Errorf("shards sharing nothing: NIC peak %d, ToR downlink peak %d, not above the sharing shards' %d, %d: this test shows nothing",
			nic(nothing), tor(nothing), nic(shared), tor(shared))
	}
}
