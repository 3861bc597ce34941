package homa_test

import (
	"sync"
	"testing"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/priority"
)

// TestSharedCutoffs: shards that record their messages in one
// SharedCutoffs leave the default cutoffs once MinMessages messages were
// recorded over all of them, not each, and every shard then reads the
// same cutoffs under the same version, as one estimator fed all the
// messages would announce. Run with -race: the shards record from
// goroutines of their own.
func TestSharedCutoffs(t *testing.T) {
	cfg := priority.EstimatorConfig{MinMessages: 1024, RecomputeEvery: 256}
	const shards, each = 4, 256 // 4 x 256 = MinMessages, in whole batches
	shared := homa.NewSharedCutoffs(cfg)
	ests := make([]core.Estimator, shards)
	for k := range ests {
		ests[k] = shared.Shard()
	}
	// Lengths spread over three orders of magnitude, all unscheduled
	// below 10 KB: the cutoffs must separate them.
	length := func(k, i int) uint32 { return uint32(100 + (k*each+i)%97*101) }
	var wg sync.WaitGroup
	for k := range ests {
		wg.Go(func() {
			for i := range each - 1 {
				ests[k].Record(length(k, i), 10_000)
			}
		})
	}
	wg.Wait()
	if c, _ := shared.Cutoffs(); c != priority.Default {
		t.Fatalf("cutoffs left the default after %d of %d messages: %+v", shards*(each-1), cfg.MinMessages, c)
	}
	for k := range ests {
		ests[k].Record(length(k, each-1), 10_000)
	}
	got, sched := shared.Cutoffs()
	if got == priority.Default {
		t.Fatalf("cutoffs still the default after %d messages over %d shards", shards*each, shards)
	}
	// One estimator fed the same messages (in another order: the
	// estimate is of their counts) announces the same.
	one := priority.NewEstimator(cfg)
	for k := range shards {
		for i := range each {
			one.Record(length(k, i), 10_000)
		}
	}
	want, wantSched := one.Cutoffs()
	if got.Values != want.Values || sched != wantSched {
		t.Errorf("shared cutoffs %v (%d scheduled levels), one estimator's %v (%d)", got.Values, sched, want.Values, wantSched)
	}
	for k := range ests {
		if c, _ := ests[k].Cutoffs(); c != got {
			t.Errorf("shard %d reads %+v, the shared estimator %+v", k, c, got)
		}
	}
}
