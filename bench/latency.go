package bench

import (
	"slices"
	"time"
)

// latencies records round-trip times and answers percentile queries. It
// sorts once, on the first query after the last record.
type latencies struct {
	d      []time.Duration
	sorted bool
}

// newLatencies makes a recorder with room for n samples, so that
// recording does not allocate.
func newLatencies(n int) *latencies {
	return &latencies{d: make([]time.Duration, 0, n)}
}

func (l *latencies) record(d time.Duration) {
	l.d = append(l.d, d)
	l.sorted = false
}

func (l *latencies) len() int { return len(l.d) }

// quantile returns the num/den quantile by the nearest-rank method: the
// smallest sample with at least num/den of all samples at or below it.
// The fraction is given as integers so that ranks are exact (99.9% is
// 999/1000). An empty recorder returns 0.
func (l *latencies) quantile(num, den int) time.Duration {
	n := len(l.d)
	if n == 0 {
		return 0
	}
	if !l.sorted {
		slices.Sort(l.d)
		l.sorted = true
	}
	rank := (num*n + den - 1) / den // ceil(num/den * n), 1-based
	rank = max(rank, 1)
	rank = min(rank, n)
	return l.d[rank-1]
}

// Summary is the outcome of a run of Ping.
type Summary struct {
	Count   int           // completed round trips
	Size    int           // payload bytes each way
	Elapsed time.Duration // wall time of the measured round trips
	Min     time.Duration
	Median  time.Duration
	P99     time.Duration
	P999    time.Duration
	Max     time.Duration
}

func (l *latencies) summarize(size int, elapsed time.Duration) Summary {
	return Summary{
		Count:   l.len(),
		Size:    size,
		Elapsed: elapsed,
		Min:     l.quantile(0, 1),
		Median:  l.quantile(1, 2),
		P99:     l.quantile(99, 100),
		P999:    l.quantile(999, 1000),
		Max:     l.quantile(1, 1),
	}
}

// Rate is round trips per second; 0 when nothing was measured.
func (s Summary) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Count) / s.Elapsed.Seconds()
}

// Mbps is the payload throughput in Mbit/s in each direction.
func (s Summary) Mbps() float64 {
	return s.Rate() * float64(s.Size) * 8 / 1e6
}

// micros converts a duration to microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
