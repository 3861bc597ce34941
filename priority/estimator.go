package priority

// Defaults for EstimatorConfig.
const (
	// DefaultWindowBytes: counts halve after every 100 MB received, so
	// the estimate reflects roughly the last 200 MB (two hundred largest
	// messages; 64 ms at 25 Gbit/s).
	DefaultWindowBytes = 100_000_000
	// DefaultMinMessages: the cutoffs stay Default for the first 1,000
	// messages.
	DefaultMinMessages = 1000
	// DefaultRecomputeEvery: the cutoffs are recomputed after every
	// 1,000 messages.
	DefaultRecomputeEvery = 1000
	// DefaultHysteresis: new cutoffs must balance the levels better by
	// 10% of a level's share before they replace the current ones.
	DefaultHysteresis = 100

	// maxWindowBytes bounds WindowBytes so that the byte counts, and the
	// products the computation forms from them, fit in 64 bits.
	maxWindowBytes = 1 << 40
)

// EstimatorConfig tunes an Estimator. A zero field means its default.
type EstimatorConfig struct {
	// WindowBytes sets how far back the estimate looks: each time this
	// many message bytes have been recorded since the last halving, all
	// counts are halved, so traffic k windows old weighs 2^-k. At most
	// 2^40; zero or negative means 100,000,000.
	WindowBytes int
	// MinMessages is how many messages must be recorded before the
	// cutoffs leave Default. Zero or negative means 1,000.
	MinMessages int
	// RecomputeEvery is how many messages are recorded between two
	// computations of the cutoffs after the first. Zero or negative
	// means 1,000.
	RecomputeEvery int
	// Hysteresis, in per mille, keeps the cutoffs (and so the version)
	// steady under small fluctuations of the traffic: the split between
	// unscheduled and scheduled levels changes only when 8 times the
	// unscheduled fraction is more than 1/2 + Hysteresis/1000 away from
	// the current number of unscheduled levels; and with an unchanged
	// split new cutoffs replace the current ones only when, on the
	// current counts, the worst level under the current cutoffs is
	// further from its share of the bytes than the worst under the new
	// ones by more than Hysteresis/1000 of a share. Zero means 100;
	// negative means none (every computation adopts its result).
	Hysteresis int
}

// WithDefaults returns c with every unset field replaced by its default
// and WindowBytes capped at 2^40.
func (c EstimatorConfig) WithDefaults() EstimatorConfig {
	if c.WindowBytes <= 0 {
		c.WindowBytes = DefaultWindowBytes
	}
	c.WindowBytes = min(c.WindowBytes, maxWindowBytes)
	if c.MinMessages <= 0 {
		c.MinMessages = DefaultMinMessages
	}
	if c.RecomputeEvery <= 0 {
		c.RecomputeEvery = DefaultRecomputeEvery
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = DefaultHysteresis
	}
	return c
}

// Estimator learns a receiver's unscheduled cutoffs from the messages it
// receives.
//
// It keeps a histogram of unscheduled bytes by message length (960
// log-linear buckets, each at most 1.6% wide) and a count of scheduled
// bytes, both decayed by halving every WindowBytes recorded bytes. Its
// size is fixed (under 8 KB); Record is O(1) without allocation, plus a
// few passes over the histogram at each halving and computation.
//
// A computation (when MinMessages messages have been recorded, then every
// RecomputeEvery messages) works on the decayed counts. With B bytes in
// all and Bu of them unscheduled, it gives U = clamp(round(8*Bu/B), 1, 7)
// levels to unscheduled packets (the highest ones) and S = 8-U to
// scheduled ones. It then cuts the lengths into at most U groups, shorter
// groups at higher levels:
//
//  1. The j-th cut (j = 1..U-1) goes at the histogram boundary nearest,
//     in bytes, to the length below which j*Bu/U unscheduled bytes lie,
//     but never before the shortest message seen. Cuts that coincide
//     leave fewer groups.
//  2. While there are fewer groups than U, the heaviest group with more
//     than one non-empty bucket is split where it is nearest to two
//     halves, so spare levels separate distinct lengths instead of
//     staying empty (a few short messages among large ones get a level
//     of their own).
//
// The i-th group from the top gets level 7-i with the largest length of
// its last non-empty bucket as cutoff; the last group's cutoff, and that
// of any level left over below it, is MaxMessage; the scheduled levels
// get 0. So the levels in use are the top ones, as many as U and the
// distinct lengths allow; the cutoffs hug the lengths actually seen; and
// every unscheduled level carries Bu/U bytes give or take 1.5 times the
// largest number of bytes in one histogram bucket (the bytes of one
// length cannot be split). Finally Hysteresis decides whether the result
// replaces the current cutoffs.
type Estimator struct {
	cfg EstimatorConfig

	unsched    [numBuckets]uint64 // decayed unscheduled bytes by length bucket
	sched      uint64             // decayed scheduled bytes
	sinceDecay uint64             // bytes recorded since the last halving

	messages     int // messages recorded, saturating at MinMessages
	sinceCompute int // messages recorded since the last computation

	cur         Cutoffs
	schedLevels int
}

// defaultSchedLevels is the number of scheduled levels under Default.
const defaultSchedLevels = 4

// NewEstimator returns an Estimator that reports Default until it has seen
// cfg.MinMessages messages.
func NewEstimator(cfg EstimatorConfig) *Estimator {
	return &Estimator{cfg: cfg.WithDefaults(), cur: Default, schedLevels: defaultSchedLevels}
}

// Record counts one incoming message: its total length, and how many of
// its bytes the sender sends unscheduled (the DATA header's incoming
// field; capped at length). Call it once per message, when its first
// packet arrives. It may recompute the cutoffs (see Estimator).
func (e *Estimator) Record(length, unschedBytes uint32) {
	length = min(length, MaxMessage)
	u := min(unschedBytes, length)
	e.unsched[bucketOf(length)] += uint64(u)
	e.sched += uint64(length - u)
	e.sinceDecay += uint64(length)
	if e.sinceDecay >= uint64(e.cfg.WindowBytes) {
		e.sinceDecay = 0
		e.halve()
	}
	if e.messages < e.cfg.MinMessages {
		e.messages++
		if e.messages == e.cfg.MinMessages {
			e.compute() // the first computation
		}
		return
	}
	e.sinceCompute++
	if e.sinceCompute >= e.cfg.RecomputeEvery {
		e.sinceCompute = 0
		e.compute()
	}
}

// halve halves every count, and forgets the buckets left with less than
// 1/65536 of a window: traffic that stopped is gone after about 17
// windows (a bucket holds about two at most), rather than keeping a
// length class of its own for ever.
func (e *Estimator) halve() {
	floor := uint64(e.cfg.WindowBytes) >> 16
	for i, m := range e.unsched {
		if m >>= 1; m < floor {
			m = 0
		}
		e.unsched[i] = m
	}
	e.sched >>= 1
}

// Cutoffs returns the current cutoffs and the number of scheduled levels:
// priorities 0..schedLevels-1 are for scheduled packets, the others for
// unscheduled ones. Until MinMessages messages have been recorded they
// are Default and 4. The version increases (skipping 0 and 1 when it
// wraps) each time a computation changes the values, and only then.
func (e *Estimator) Cutoffs() (c Cutoffs, schedLevels int) {
	return e.cur, e.schedLevels
}

// compute derives cutoffs from the histogram and adopts them unless
// Hysteresis keeps the current ones.
func (e *Estimator) compute() {
	var bu uint64
	for _, m := range e.unsched {
		bu += m
	}
	b := bu + e.sched
	if b == 0 {
		return // every recent message was empty: nothing to learn from
	}
	u := e.unschedLevels(bu, b)
	var p partition
	p.balance(&e.unsched, bu, u)
	p.fill(&e.unsched, u)
	v := p.values(u)
	if h := e.cfg.Hysteresis; h > 0 && u == Levels-e.schedLevels {
		cur := imbalance(&e.unsched, &e.cur.Values, bu, u)
		next := imbalance(&e.unsched, &v, bu, u)
		if 1000*cur <= 1000*next+uint64(h)*bu {
			return // not enough better
		}
	}
	e.adopt(v, Levels-u)
}

// unschedLevels returns how many levels go to unscheduled packets when bu
// of b bytes are unscheduled: round(8*bu/b) clamped to 1..7, or the
// current number while 8*bu/b is within 1/2 + Hysteresis/1000 of it.
func (e *Estimator) unschedLevels(bu, b uint64) int {
	cur := Levels - e.schedLevels
	if h := e.cfg.Hysteresis; h > 0 {
		x, c := 8000*bu, 1000*uint64(cur)*b // 1000 times 8*bu/b and cur, times b
		if max(x, c)-min(x, c) <= uint64(500+h)*b {
			return cur
		}
	}
	u := int((16*bu + b) / (2 * b)) // round(8*bu/b), halves up
	return min(max(u, 1), Levels-1)
}

// adopt makes v the current cutoffs, with s scheduled levels, bumping the
// version if v differs from the current values. (The values determine s:
// it is the number of zero entries at the bottom.)
func (e *Estimator) adopt(v [Levels]uint32, s int) {
	e.schedLevels = s
	if v == e.cur.Values {
		return
	}
	e.cur.Values = v
	e.cur.Version = nextVersion(e.cur.Version)
}

// nextVersion returns the version after v. It skips 0, which a sender
// that knows nothing of a receiver may send, and 1, Default's version,
// which senders assume for a receiver that has not sent cutoffs: reusing
// either could leave a sender with stale cutoffs that match our version.
func nextVersion(v uint16) uint16 {
	v++
	if v <= Default.Version {
		v = Default.Version + 1
	}
	return v
}

// histogram is the Estimator's unscheduled bytes by length bucket.
type histogram = [numBuckets]uint64

// partition divides the non-empty buckets of a histogram into groups of
// consecutive buckets, shortest lengths first: group i ends with bucket
// last[i], a non-empty one, and the last group with the last non-empty
// bucket.
type partition struct {
	last [Levels]int
	n    int
}

// add ends a group at bucket k, unless a group already ends there.
func (p *partition) add(k int) {
	if p.n == 0 || p.last[p.n-1] != k {
		p.last[p.n] = k
		p.n++
	}
}

// balance cuts h, holding bu bytes, into at most u groups of about bu/u
// bytes each: step 1 of the Estimator's computation. Comparisons are
// scaled by u to stay in integers.
func (p *partition) balance(h *histogram, bu uint64, u int) {
	p.n = 0
	uu := uint64(u)
	j := uint64(1)
	var cum uint64 // bytes in the buckets before k
	prev := -1     // the last non-empty bucket before k
	for k, m := range h {
		if m == 0 {
			continue
		}
		before, after := cum*uu, (cum+m)*uu
		for ; j < uu && after >= j*bu; j++ {
			if ideal := j * bu; cum > 0 && ideal-before < after-ideal {
				p.add(prev) // the boundary before k is nearer
			} else {
				p.add(k)
			}
		}
		cum += m
		prev = k
	}
	if prev >= 0 {
		p.add(prev)
	}
}

// fill splits the heaviest group that has more than one non-empty
// bucket, where it is nearest to two halves, until there are u groups or
// no group can be split: step 2 of the Estimator's computation. Cuts go
// after non-empty buckets, leaving at least one on each side.
func (p *partition) fill(h *histogram, u int) {
	for p.n < u {
		g, mass, end := -1, uint64(0), 0
		for i := range p.n {
			if m, last, n := p.group(h, i); n > 1 && m > mass {
				g, mass, end = i, m, last
			}
		}
		if g < 0 {
			return
		}
		var cum uint64 // bytes in the group before k
		prev := -1     // the last non-empty bucket before k
		k := p.first(g)
		for ; ; k++ {
			if m := h[k]; m != 0 {
				if k == end {
					k = prev
					break
				}
				if 2*(cum+m) >= mass {
					if prev >= 0 && mass-2*cum < 2*(cum+m)-mass {
						k = prev // nearer to half
					}
					break
				}
				prev = k
				cum += m
			}
		}
		copy(p.last[g+1:p.n+1], p.last[g:p.n])
		p.last[g] = k
		p.n++
	}
}

// first returns the first bucket of group g.
func (p *partition) first(g int) int {
	if g == 0 {
		return 0
	}
	return p.last[g-1] + 1
}

// group returns the bytes in group g, its last non-empty bucket and how
// many non-empty buckets it has.
func (p *partition) group(h *histogram, g int) (mass uint64, last, n int) {
	for k := p.first(g); k <= p.last[g]; k++ {
		if h[k] != 0 {
			mass += h[k]
			last = k
			n++
		}
	}
	return mass, last, n
}

// values returns the cutoffs of the partition with u unscheduled levels.
func (p *partition) values(u int) (v [Levels]uint32) {
	for l := Levels - u; l < Levels; l++ {
		v[l] = MaxMessage
		if i := Levels - 1 - l; i < p.n-1 {
			v[l] = min(bucketMax(p.last[i]), MaxMessage)
		}
	}
	return v
}

// imbalance returns how far the worst of the top u levels under cutoffs
// v is from carrying its share of the bu bytes in h, times u.
func imbalance(h *histogram, v *[Levels]uint32, bu uint64, u int) uint64 {
	c := Cutoffs{Values: *v}
	var lv [Levels]uint64
	for k, m := range h {
		if m != 0 {
			lv[c.Priority(bucketMax(k))] += m
		}
	}
	var worst uint64
	for _, x := range lv[Levels-u:] {
		x *= uint64(u)
		worst = max(worst, max(x, bu)-min(x, bu))
	}
	return worst
}
