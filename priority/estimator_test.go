package priority

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sample is one recorded message.
type sample struct{ length, unsched uint32 }

// linuxUnsched is how many bytes a Linux sender sends unscheduled.
const linuxUnsched = 40_000

// withLinuxUnsched returns a message of the given length with Linux's
// unscheduled byte count.
func withLinuxUnsched(length uint32) sample {
	return sample{length, min(length, linuxUnsched)}
}

// learn records the samples in a fresh Estimator that computes once, after
// the last one, without decay or hysteresis, and returns its cutoffs.
func learn(samples []sample) (Cutoffs, int) {
	e := NewEstimator(EstimatorConfig{WindowBytes: math.MaxInt, MinMessages: len(samples), Hysteresis: -1})
	for _, s := range samples {
		e.Record(s.length, s.unsched)
	}
	return e.Cutoffs()
}

// repeat returns n copies of each sample, interleaved.
func repeat(n int, s ...sample) []sample {
	out := make([]sample, 0, n*len(s))
	for range n {
		out = append(out, s...)
	}
	return out
}

// levelBytes returns the unscheduled bytes of the samples at each
// priority the cutoffs give them.
func levelBytes(c *Cutoffs, samples []sample) (lv [Levels]uint64) {
	for _, s := range samples {
		lv[c.Priority(s.length)] += uint64(min(s.unsched, s.length))
	}
	return lv
}

func TestEstimatorDefaultsUntilMinimum(t *testing.T) {
	e := NewEstimator(EstimatorConfig{MinMessages: 100})
	for i := range 99 {
		e.Record(500, 500)
		if c, s := e.Cutoffs(); c != Default || s != 4 {
			t.Fatalf("after %d messages: %+v, %d scheduled levels; want Default, 4", i+1, c, s)
		}
	}
	e.Record(500, 500)
	c, s := e.Cutoffs()
	if c.Version != 2 || s != 1 {
		t.Fatalf("after 100 messages: %+v, %d scheduled levels; want version 2, 1", c, s)
	}
}

func TestEstimatorShapes(t *testing.T) {
	const M = MaxMessage
	b100, b1000, b10k := bucketMax(bucketOf(100)), bucketMax(bucketOf(1000)), bucketMax(bucketOf(10_000))
	tests := []struct {
		name    string
		samples []sample
		want    [Levels]uint32
		sched   int
	}{
		{
			name:    "one size, all unscheduled: one group, one level left for grants",
			samples: repeat(1000, sample{1000, 1000}),
			want:    [Levels]uint32{0, M, M, M, M, M, M, M},
			sched:   1,
		},
		{
			// 40% unscheduled: 3 levels. The short messages' bytes are
			// nearer to nothing than to a third, yet they get the top
			// level to themselves.
			name:    "bimodal 100 B and 100 KB",
			samples: repeat(500, withLinuxUnsched(100), withLinuxUnsched(100_000)),
			want:    [Levels]uint32{0, 0, 0, 0, 0, M, M, b100},
			sched:   5,
		},
		{
			// Half unscheduled: 4 levels. Equal bytes at 1,000 and
			// 10,000, twice as many in the unscheduled part of 100 KB:
			// the byte balance puts 100 with 1,000, the spare level
			// separates them.
			name: "four sizes",
			samples: repeat(200, sample{1000, 1000}, sample{1000, 1000}, sample{1000, 1000},
				sample{1000, 1000}, sample{1000, 1000}, sample{1000, 1000}, sample{1000, 1000},
				sample{1000, 1000}, sample{1000, 1000}, sample{1000, 1000}, sample{10_000, 10_000},
				withLinuxUnsched(100_000), sample{100, 100}),
			want:  [Levels]uint32{0, 0, 0, 0, M, b10k, b1000, b100},
			sched: 4,
		},
		{
			// The spare levels separate 100 from 1,000 although the
			// byte balance alone would put them together.
			name:    "all unscheduled: still one scheduled level",
			samples: repeat(300, sample{100, 100}, sample{1000, 1000}, sample{10_000, 10_000}),
			want:    [Levels]uint32{0, M, M, M, M, M, b1000, b100},
			sched:   1,
		},
		{
			name:    "all scheduled: still one unscheduled level",
			samples: repeat(1000, sample{50_000, 0}, sample{300, 0}),
			want:    [Levels]uint32{0, 0, 0, 0, 0, 0, 0, M},
			sched:   7,
		},
		{
			name:    "1% unscheduled rounds to one level",
			samples: repeat(1000, sample{MaxMessage, 10_000}),
			want:    [Levels]uint32{0, 0, 0, 0, 0, 0, 0, M},
			sched:   7,
		},
		{
			name:    "longer than MaxMessage counts as MaxMessage",
			samples: repeat(1000, sample{math.MaxUint32, math.MaxUint32}, sample{10, 10}),
			want:    [Levels]uint32{0, M, M, M, M, M, M, 10},
			sched:   1,
		},
	}
	for _, tt := range tests {
		c, s := learn(tt.samples)
		if c.Values != tt.want || s != tt.sched {
			t.Errorf("%s: got %v, %d scheduled levels; want %v, %d", tt.name, c.Values, s, tt.want, tt.sched)
		}
	}
}

// TestEstimatorUniformLengths feeds lengths spread evenly over 1..100,000
// with Linux's 40,000 unscheduled bytes: 64% of the bytes are
// unscheduled, so 5 levels, and the ideal boundaries of equal unscheduled
// bytes are 35,777, 52,000, 68,000 and 84,000 bytes. The cutoffs must be
// within a bucket (1.6%) of them and the levels within 5% of a fifth.
func TestEstimatorUniformLengths(t *testing.T) {
	var samples []sample
	for i := range 100_000 {
		samples = append(samples, withLinuxUnsched(uint32(1+i*7919%100_000)))
	}
	c, s := learn(samples)
	if s != 3 {
		t.Fatalf("%d scheduled levels, want 3 (cutoffs %v)", s, c.Values)
	}
	ideal := [Levels]float64{3: MaxMessage, 4: 84_000, 5: 68_000, 6: 52_000, 7: 35_777}
	for i := s; i < Levels; i++ {
		if got := float64(c.Values[i]); math.Abs(got-ideal[i]) > ideal[i]/subBuckets {
			t.Errorf("cutoff %d = %v, want about %v", i, got, ideal[i])
		}
	}
	checkBalance(t, &c, s, samples, 0.05)
}

// logUniform returns a message log-uniform over 1..100,000 bytes (each
// length class sends as many messages) with Linux's unscheduled bytes:
// 77% of the bytes are unscheduled.
func logUniform(rng *rand.Rand) sample {
	return withLinuxUnsched(uint32(math.Exp(rng.Float64() * math.Log(100_000))))
}

// TestEstimatorLogUniform feeds 200,000 log-uniform messages: 6 levels,
// and each must carry its share within 5%.
func TestEstimatorLogUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	samples := make([]sample, 200_000)
	for i := range samples {
		samples[i] = logUniform(rng)
	}
	c, s := learn(samples)
	if s != 2 {
		t.Fatalf("%d scheduled levels, want 2 (cutoffs %v)", s, c.Values)
	}
	checkBalance(t, &c, s, samples, 0.05)
}

// checkBalance fails t unless every unscheduled level carries the
// unscheduled bytes of the samples divided by the number of unscheduled
// levels, within the given relative tolerance.
func checkBalance(t *testing.T, c *Cutoffs, s int, samples []sample, tol float64) {
	t.Helper()
	lv := levelBytes(c, samples)
	var bu uint64
	for _, b := range lv {
		bu += b
	}
	share := float64(bu) / float64(Levels-s)
	for i := s; i < Levels; i++ {
		if d := math.Abs(float64(lv[i])-share) / share; d > tol {
			t.Errorf("level %d carries %d bytes, %.1f%% off the share %.0f (cutoffs %v)",
				i, lv[i], 100*d, share, c.Values)
		}
	}
}

// Two workloads whose cutoffs differ: short messages (100 and 1,000
// bytes) and long ones (10,000 and 100,000 bytes), all unscheduled. Each
// puts its shorter size alone at the top level.
var (
	shortPair = []sample{{100, 100}, {1000, 1000}}
	longPair  = []sample{{10_000, 10_000}, {100_000, 100_000}}
)

// feed records n rounds of the samples.
func feed(e *Estimator, n int, samples []sample) {
	for range n {
		for _, s := range samples {
			e.Record(s.length, s.unsched)
		}
	}
}

func TestEstimatorVersion(t *testing.T) {
	e := NewEstimator(EstimatorConfig{MinMessages: 10, RecomputeEvery: 10, WindowBytes: 1_000_000})
	feed(e, 5, shortPair)
	first, _ := e.Cutoffs()
	if first.Version != 2 || first.Values[7] != bucketMax(bucketOf(100)) {
		t.Fatalf("first computation: %+v, want version 2 and 100 alone at the top", first)
	}
	feed(e, 50, shortPair) // ten computations, same traffic
	if c, _ := e.Cutoffs(); c != first {
		t.Fatalf("same traffic changed the cutoffs: %+v, was %+v", c, first)
	}
	// New traffic: the values change, maybe more than once on the way,
	// each change one version up, then stay.
	versions := []uint16{first.Version}
	for range 40 {
		feed(e, 5, longPair)
		c, _ := e.Cutoffs()
		if versions[len(versions)-1] != c.Version {
			versions = append(versions, c.Version)
		}
	}
	last, s := e.Cutoffs()
	if p, q := last.Priority(10_000), last.Priority(100_000); p <= q || q < uint8(s) {
		t.Fatalf("after the shift: %v, want 10,000 above 100,000 above the scheduled levels", last.Values)
	}
	for i, v := range versions {
		if v != first.Version+uint16(i) {
			t.Fatalf("versions %v: want consecutive bumps", versions)
		}
	}
	if len(versions) < 2 {
		t.Fatalf("versions %v: no change", versions)
	}
	// A change of values is a version bump, and only a change is.
	e.adopt(last.Values, 1)
	if c, _ := e.Cutoffs(); c.Version != last.Version {
		t.Fatalf("same values bumped the version to %d", c.Version)
	}
	v := last.Values
	v[7]++
	e.adopt(v, 1)
	if c, _ := e.Cutoffs(); c.Version != last.Version+1 {
		t.Fatalf("new values: version %d, want %d", c.Version, last.Version+1)
	}
}

// TestEstimatorDecay checks that old traffic is forgotten: eleven windows
// of short messages, then thirty of long ones, and the cutoffs are those
// of the long ones alone.
func TestEstimatorDecay(t *testing.T) {
	cfg := EstimatorConfig{WindowBytes: 1_000_000, MinMessages: 100, RecomputeEvery: 100, Hysteresis: -1}
	e := NewEstimator(cfg)
	feed(e, 10_000, shortPair)
	if c, _ := e.Cutoffs(); c.Values[7] != bucketMax(bucketOf(100)) {
		t.Fatalf("short traffic: %v", c.Values)
	}
	feed(e, 300, longPair)
	got, _ := e.Cutoffs()
	fresh := NewEstimator(cfg)
	feed(fresh, 100, longPair)
	if want, _ := fresh.Cutoffs(); got.Values != want.Values {
		t.Fatalf("after the shift: %v, want %v as if the short traffic never was", got.Values, want.Values)
	}
}

// TestEstimatorHysteresis feeds a steady random workload and counts the
// version changes over 500 computations: the hysteresis keeps them few,
// while without it the noise changes the cutoffs most of the time.
func TestEstimatorHysteresis(t *testing.T) {
	count := func(h int) int {
		e := NewEstimator(EstimatorConfig{Hysteresis: h})
		rng := rand.New(rand.NewPCG(3, 4))
		for range 1000 {
			s := logUniform(rng)
			e.Record(s.length, s.unsched)
		}
		first, _ := e.Cutoffs()
		for range 500_000 {
			s := logUniform(rng)
			e.Record(s.length, s.unsched)
		}
		last, _ := e.Cutoffs()
		return int(last.Version - first.Version)
	}
	with, without := count(0), count(-1)
	t.Logf("version changes in 500 computations: %d with hysteresis, %d without", with, without)
	if with > 5 || without < 100 {
		t.Fatalf("version changes: %d with hysteresis (want <= 5), %d without (want >= 100)", with, without)
	}
}

func TestEstimatorRecordAllocs(t *testing.T) {
	e := NewEstimator(EstimatorConfig{MinMessages: 1, RecomputeEvery: 1})
	n := uint32(1)
	allocs := testing.AllocsPerRun(1000, func() {
		n = n*1664525 + 1013904223
		e.Record(n%MaxMessage, n%50_000)
		e.Cutoffs()
	})
	if allocs != 0 {
		t.Fatalf("Record allocates %v times", allocs)
	}
}

func BenchmarkRecord(b *testing.B) {
	e := NewEstimator(EstimatorConfig{})
	b.ReportAllocs()
	n := uint32(1)
	for b.Loop() {
		n = n*1664525 + 1013904223
		e.Record(n%MaxMessage, n%50_000)
	}
}
