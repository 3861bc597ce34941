package priority

import (
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// genWorkload draws a workload: up to six clusters of lengths, each with
// its own spread, unscheduled limit and weight, sampled by a seeded
// generator.
func genWorkload(t *rapid.T) []sample {
	type cluster struct{ lo, width, limit uint32 }
	caps := []uint32{0, 500, 10_000, 40_000, MaxMessage}
	clusters := make([]cluster, rapid.IntRange(1, 6).Draw(t, "clusters"))
	for i := range clusters {
		exp := rapid.IntRange(0, 19).Draw(t, "exp")
		lo := uint32(1)<<exp + rapid.Uint32Range(0, 1<<exp).Draw(t, "lo")
		lo = min(lo, MaxMessage)
		width := rapid.Uint32Range(0, min(lo, MaxMessage-lo)).Draw(t, "width")
		clusters[i] = cluster{lo, width, rapid.SampledFrom(caps).Draw(t, "unsched")}
	}
	n := rapid.IntRange(1, 3000).Draw(t, "messages")
	rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
	samples := make([]sample, n)
	for i := range samples {
		c := clusters[rng.IntN(len(clusters))]
		length := c.lo + rng.Uint32N(c.width+1)
		samples[i] = sample{length, min(length, c.limit)}
	}
	return samples
}

// TestRapidCutoffs checks one computation over a random workload (no
// decay, no hysteresis) against the rules: the level split, the cutoffs'
// shape (0 below the lowest unscheduled level, MaxMessage there,
// non-increasing above), every message at an unscheduled level, the used levels at the
// top and as many as the distinct lengths allow, and the byte balance:
// every unscheduled level carries Bu/U bytes within 1.5 times the largest
// number of bytes in one histogram bucket.
func TestRapidCutoffs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		samples := genWorkload(t)
		c, s := learn(samples)

		var h histogram
		var b, bu uint64
		for _, x := range samples {
			h[bucketOf(x.length)] += uint64(x.unsched)
			b += uint64(x.length)
			bu += uint64(x.unsched)
		}
		if b == 0 {
			if c != Default || s != defaultSchedLevels {
				t.Fatalf("empty messages only: %+v, %d", c, s)
			}
			return
		}
		u := Levels - s
		if want := min(max(int((16*bu+b)/(2*b)), 1), Levels-1); u != want {
			t.Fatalf("%d unscheduled levels, want %d (%d of %d bytes unscheduled)", u, want, bu, b)
		}
		for i := range Levels {
			switch {
			case i < s && c.Values[i] != 0:
				t.Fatalf("scheduled level %d has cutoff %d: %v", i, c.Values[i], c.Values)
			case i == s && c.Values[i] != MaxMessage:
				t.Fatalf("lowest unscheduled level %d has cutoff %d: %v", i, c.Values[i], c.Values)
			case i > s && c.Values[i] > c.Values[i-1]:
				t.Fatalf("cutoffs increase at %d: %v", i, c.Values)
			}
		}
		for _, n := range []uint32{0, 1, MaxMessage} {
			if p := c.Priority(n); p < uint8(s) {
				t.Fatalf("length %d at scheduled level %d: %v", n, p, c.Values)
			}
		}
		lv := levelBytes(&c, samples)
		for _, x := range samples {
			if p := c.Priority(x.length); p < uint8(s) {
				t.Fatalf("message of %d bytes at scheduled level %d: %v", x.length, p, c.Values)
			}
		}

		var m uint64 // the largest bucket
		distinct := 0
		for _, x := range h {
			m = max(m, x)
			if x != 0 {
				distinct++
			}
		}
		used := 0
		for i := Levels - 1; i >= s; i-- {
			if lv[i] != 0 {
				if used != Levels-1-i {
					t.Fatalf("level %d used below an empty level: %v (cutoffs %v)", i, lv, c.Values)
				}
				used++
			}
			d := max(lv[i]*uint64(u), bu) - min(lv[i]*uint64(u), bu)
			if 2*d > 3*m*uint64(u) {
				t.Fatalf("level %d carries %d bytes, share %d, largest bucket %d: %v (cutoffs %v)",
					i, lv[i], bu/uint64(u), m, lv, c.Values)
			}
		}
		if bu > 0 && used != min(u, distinct) {
			t.Fatalf("%d levels used of %d, with %d distinct length buckets: %v", used, u, distinct, c.Values)
		}
	})
}

// TestRapidEstimatorStream records random workloads, in phases, with
// decay, hysteresis and random settings, and checks after every message
// that the cutoffs keep their shape and that the version moves exactly
// when the values do, by one.
func TestRapidEstimatorStream(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := NewEstimator(EstimatorConfig{
			WindowBytes:    rapid.IntRange(-1, 50_000_000).Draw(t, "window"),
			MinMessages:    rapid.IntRange(-1, 300).Draw(t, "min"),
			RecomputeEvery: rapid.IntRange(-1, 300).Draw(t, "every"),
			Hysteresis:     rapid.IntRange(-1, 300).Draw(t, "hysteresis"),
		})
		prev, _ := e.Cutoffs()
		for range rapid.IntRange(1, 3).Draw(t, "phases") {
			for _, x := range genWorkload(t) {
				e.Record(x.length, x.unsched)
				c, s := e.Cutoffs()
				switch {
				case c.Values == prev.Values && c.Version != prev.Version:
					t.Fatalf("version %d -> %d without a change", prev.Version, c.Version)
				case c.Values != prev.Values && c.Version != nextVersion(prev.Version):
					t.Fatalf("version %d -> %d on a change", prev.Version, c.Version)
				case s < 1 || s >= Levels || c.Values[s] != MaxMessage || (s > 0 && c.Values[s-1] != 0):
					t.Fatalf("bad split: %v, %d scheduled", c.Values, s)
				}
				for i := s + 1; i < Levels; i++ {
					if c.Values[i] > c.Values[i-1] {
						t.Fatalf("cutoffs increase at %d: %v", i, c.Values)
					}
				}
				prev = c
			}
		}
	})
}

// TestRapidPriority checks Priority against its definition on arbitrary
// cutoffs, monotonic or not.
func TestRapidPriority(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c Cutoffs
		for i := range c.Values {
			c.Values[i] = rapid.Uint32Range(0, 2*MaxMessage).Draw(t, "cutoff")
		}
		n := rapid.Uint32Range(0, 2*MaxMessage).Draw(t, "length")
		p := int(c.Priority(n))
		if p > 0 && c.Values[p] < n {
			t.Fatalf("Priority(%d) = %d, but cutoff %d is %d", n, p, p, c.Values[p])
		}
		for i := p + 1; i < Levels; i++ {
			if c.Values[i] >= n {
				t.Fatalf("Priority(%d) = %d, but cutoff %d is %d", n, p, i, c.Values[i])
			}
		}
	})
}
