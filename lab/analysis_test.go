package lab

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// synthetic returns calibration samples with a flat 100 µs RTT and loaded
// samples whose RTT is short times that for messages of at most limit
// bytes (one in 50 of them tail times) and long times otherwise.
func synthetic(d *workload.Dist, limit int, short, tail, long float64) (calib, loaded []workload.Sample) {
	const base = 100 * time.Microsecond
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		calib = append(calib, workload.Sample{Size: d.Sample(r), RTT: base})
	}
	nShort := 0
	for range 20000 {
		size := d.Sample(r)
		f := long
		if size <= limit {
			f = short
			if nShort%50 == 0 {
				f = tail
			}
			nShort++
		}
		loaded = append(loaded, workload.Sample{Size: size, RTT: time.Duration(f * float64(base))})
	}
	return calib, loaded
}

func TestAnalyze(t *testing.T) {
	d, err := workload.Named("w4")
	if err != nil {
		t.Fatal(err)
	}
	q := d.Quantile(ShortFraction)
	calib, loaded := synthetic(d, q, 2, 10, 5)
	s := Analyze("homa", d, calib, loaded, 10*time.Second, 800)
	if s.Proto != "homa" || s.Calibrated != 2000 || s.Completed != 20000 || s.OfferedMbps != 800 {
		t.Errorf("summary header %+v", s)
	}
	if s.Short.MaxSize != q || s.Short.Slowdown50 != 2 || s.Short.Slowdown99 != 10 {
		t.Errorf("short bucket %+v, want MaxSize %d, slowdowns 2 and 10", s.Short, q)
	}
	if s.Short.P50 != 200*time.Microsecond || s.Short.P99 != time.Millisecond {
		t.Errorf("short RTTs %v %v", s.Short.P50, s.Short.P99)
	}
	bounds := TableBounds(d)
	if !slices.Contains(bounds, q) || !slices.IsSorted(bounds) || bounds[len(bounds)-1] != d.Max() {
		t.Errorf("bounds %v lack the %g quantile %d or the maximum", bounds, ShortFraction, q)
	}
	if len(s.Buckets) != len(bounds) {
		t.Fatalf("%d buckets for %d bounds", len(s.Buckets), len(bounds))
	}
	total := 0
	for _, b := range s.Buckets {
		total += b.Count
		if b.Count > 0 && b.MaxSize > q && b.Slowdown50 != 5 {
			t.Errorf("bucket up to %d: p50 slowdown %g, want 5", b.MaxSize, b.Slowdown50)
		}
	}
	if total != len(loaded) {
		t.Errorf("buckets hold %d samples of %d", total, len(loaded))
	}
	var bytes int
	for _, x := range loaded {
		bytes += x.Size
	}
	if want := float64(bytes) * 8 / 10 / 1e6; math.Abs(s.AchievedMbps-want) > 1e-9 {
		t.Errorf("achieved %g Mbit/s, want %g", s.AchievedMbps, want)
	}

	calib, loaded = synthetic(d, q, 6, 100, 5)
	tcp := Analyze("tcp", d, calib, loaded, 10*time.Second, 800)
	c := Compare(s, tcp)
	if c.First != "homa" || c.Second != "tcp" || c.MaxSize != q || c.Slowdown50 != 3 || c.Slowdown99 != 10 || c.RTT50 != 3 || c.RTT99 != 10 {
		t.Errorf("comparison %+v, want ratios 3 and 10", c)
	}
	// A run with nothing measured compares as 0, not as Inf or NaN.
	empty := Analyze("grpc", d, nil, nil, 0, 800)
	if c := Compare(s, empty); c.Slowdown50 != 0 || c.RTT99 != 0 || empty.AchievedMbps != 0 {
		t.Errorf("comparison with an empty run: %+v", c)
	}
}
