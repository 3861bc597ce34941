package core

import (
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
)

// linearBucket is the definition bucketOf implements: the first bound at
// or above v.
func linearBucket(bounds []uint64, v uint64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}

func TestBucketOf(t *testing.T) {
	for _, bounds := range [][]uint64{latencyBounds, sizeBounds, {10}, nil} {
		values := []uint64{0, 1, 1 << 63}
		for _, b := range bounds {
			values = append(values, b-1, b, b+1)
		}
		for _, v := range values {
			if got, want := bucketOf(bounds, v), linearBucket(bounds, v); got != want {
				t.Errorf("bucketOf(%v, %d) = %d, want %d", bounds, v, got, want)
			}
		}
	}
}

func TestSizeBucket(t *testing.T) {
	if len(sizeBounds) != 15 || sizeBounds[0] != 64 || sizeBounds[14] != 1<<20 {
		t.Fatalf("size bounds %v", sizeBounds)
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 100, 127, 128, 129, 1000, 65536, 65537, contract.MaxMessage, 1 << 20, 1<<20 + 1, 1 << 40} {
		if got, want := sizeBucket(v), linearBucket(sizeBounds, v); got != want {
			t.Errorf("sizeBucket(%d) = %d, want %d", v, got, want)
		}
	}
}

func TestLatencyBounds(t *testing.T) {
	if latencyBounds[0] != 5_000 || latencyBounds[len(latencyBounds)-1] != 1_000_000_000 {
		t.Errorf("latency buckets span %d..%d ns, want 5 µs..1 s", latencyBounds[0], latencyBounds[len(latencyBounds)-1])
	}
	for i := 1; i < len(latencyBounds); i++ {
		if r := float64(latencyBounds[i]) / float64(latencyBounds[i-1]); r < 1.3 || r > 2.6 {
			t.Errorf("bucket %d: ratio %.2f to the one before, want a roughly logarithmic scale", i, r)
		}
	}
}

func TestSizeClassOf(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want contract.SizeClass
	}{
		{0, contract.Size1K}, {1, contract.Size1K}, {1000, contract.Size1K}, {1001, contract.Size10K}, {10_000, contract.Size10K},
		{10_001, contract.Size100K}, {100_000, contract.Size100K}, {100_001, contract.Size1M}, {contract.MaxMessage, contract.Size1M}, {contract.MaxMessage + 1, contract.Size1M},
	} {
		if got := contract.SizeClassOf(tc.n); got != tc.want {
			t.Errorf("SizeClassOf(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	names := ""
	for c := range contract.NumSizeClasses {
		names += c.String() + " "
		if c > 0 && c.Limit() <= (c-1).Limit() {
			t.Errorf("class %v limit %d not above the previous one", c, c.Limit())
		}
	}
	if names != "1k 10k 100k 1m " || contract.NumSizeClasses.String() != "invalid" || contract.NumSizeClasses.Limit() != 0 {
		t.Errorf("class names %q", names)
	}
}

func TestHistSnapshot(t *testing.T) {
	var h histograms
	h.init()
	h.rpcDone(100, 12*time.Microsecond)
	h.rpcDone(100, 12*time.Microsecond)
	h.rpcDone(100, 2*time.Second) // beyond every bound
	h.rpcDone(100, -time.Second)  // a clock oddity counts as zero
	h.rpcDone(50_000, 4*time.Microsecond)
	s := h.latency[contract.Size1K].snapshot()
	if s.Count != 4 || s.Sum != uint64(2*12*time.Microsecond+2*time.Second) {
		t.Fatalf("1k class: count %d sum %d", s.Count, s.Sum)
	}
	if got := s.Counts[linearBucket(latencyBounds, 12_000)]; got != 2 {
		t.Errorf("12 µs bucket holds %d, want 2", got)
	}
	if got := s.Counts[len(latencyBounds)]; got != 1 {
		t.Errorf("overflow bucket holds %d, want 1", got)
	}
	if got := s.Counts[0]; got != 1 {
		t.Errorf("first bucket holds %d, want 1", got)
	}
	if s := h.latency[contract.Size100K].snapshot(); s.Count != 1 || s.Counts[0] != 1 {
		t.Errorf("100k class: %+v", s)
	}
	if s := h.latency[contract.Size10K].snapshot(); s.Count != 0 || s.Mean() != 0 || len(s.Counts) != len(latencyBounds)+1 {
		t.Errorf("10k class: %+v", s)
	}
	h.message(contract.Received, contract.Request, 100)
	h.message(contract.Received, contract.Request, 300)
	if s := h.sizes[contract.Received][contract.Request].snapshot(); s.Count != 2 || s.Sum != 400 || s.Mean() != 200 || s.Counts[1] != 1 || s.Counts[3] != 1 {
		t.Errorf("received request sizes: %+v", s)
	}
}

// TestObserveNoAlloc: recording an RPC allocates nothing.
func TestObserveNoAlloc(t *testing.T) {
	var h histograms
	h.init()
	if n := testing.AllocsPerRun(100, func() {
		h.rpcDone(200, 30*time.Microsecond)
		h.message(contract.Sent, contract.Request, 200)
	}); n != 0 {
		t.Errorf("%v allocations per observation", n)
	}
}

func TestLabels(t *testing.T) {
	if contract.Sent.String() != "sent" || contract.Received.String() != "received" || contract.NumDirections.String() != "invalid" {
		t.Error("direction names")
	}
	if contract.Request.String() != "request" || contract.Response.String() != "response" || contract.NumKinds.String() != "invalid" {
		t.Error("kind names")
	}
}
