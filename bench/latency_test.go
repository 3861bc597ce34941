package bench

import (
	"math/rand/v2"
	"testing"
	"time"
)

// shuffled returns 1..n microseconds in a random order.
func shuffled(n int) *latencies {
	l := newLatencies(n)
	for _, i := range rand.Perm(n) {
		l.record(time.Duration(i+1) * time.Microsecond)
	}
	return l
}

func TestQuantileNearestRank(t *testing.T) {
	tests := []struct {
		n, num, den int
		want        int // µs
	}{
		{100, 0, 1, 1},
		{100, 1, 2, 50},
		{100, 99, 100, 99},
		{100, 999, 1000, 100}, // rank ceil(99.9) = 100
		{100, 1, 1, 100},
		{1000, 1, 2, 500},
		{1000, 99, 100, 990},
		{1000, 999, 1000, 999},
		{1001, 1, 2, 501},
		{3, 1, 2, 2},
		{2, 1, 2, 1},
		{1, 999, 1000, 1},
	}
	for _, tt := range tests {
		got := shuffled(tt.n).quantile(tt.num, tt.den)
		if want := time.Duration(tt.want) * time.Microsecond; got != want {
			t.Errorf("n=%d quantile %d/%d = %v, want %v", tt.n, tt.num, tt.den, got, want)
		}
	}
}

func TestQuantileEmpty(t *testing.T) {
	l := newLatencies(0)
	if got := l.quantile(1, 2); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
	s := l.summarize(100, 0)
	if s != (Summary{Size: 100}) || s.Rate() != 0 || s.Mbps() != 0 {
		t.Errorf("summary of nothing = %+v, rate %v, mbps %v; want zeros", s, s.Rate(), s.Mbps())
	}
}

func TestRecordAfterQuery(t *testing.T) {
	l := shuffled(10)
	if got := l.quantile(1, 1); got != 10*time.Microsecond {
		t.Fatalf("max = %v, want 10µs", got)
	}
	l.record(time.Microsecond / 2)
	if got := l.quantile(0, 1); got != time.Microsecond/2 {
		t.Errorf("min after a new smallest sample = %v, want 500ns", got)
	}
}

func TestSummary(t *testing.T) {
	s := shuffled(1000).summarize(100, 2*time.Second)
	want := Summary{Count: 1000, Size: 100, Elapsed: 2 * time.Second,
		Min: time.Microsecond, Median: 500 * time.Microsecond, P99: 990 * time.Microsecond,
		P999: 999 * time.Microsecond, Max: 1000 * time.Microsecond}
	if s != want {
		t.Fatalf("summary = %+v, want %+v", s, want)
	}
	if s.Rate() != 500 || s.Mbps() != 0.4 {
		t.Errorf("rate %v RPCs/s, %v Mbit/s; want 500, 0.4", s.Rate(), s.Mbps())
	}
}
