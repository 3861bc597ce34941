package core

import (
	"github.com/homa-go/homa/contract"
	"math/bits"
	"time"
)

// Histograms of an endpoint: fixed buckets of counters, so that an
// observation is two additions (its bucket and the sum), with no
// allocation. The number of observations is the sum of the buckets.

// latencyBounds are the upper bounds of the RPC latency buckets, in
// nanoseconds: steps of about 1.5x from 5 µs to 1 ms, where RPCs on one
// host or a rack take their time, then 1-2-5 steps up to 1 s, where only
// long messages, losses and timeouts go.
var latencyBounds = []uint64{
	5_000, 7_500, 10_000, 15_000, 20_000, 30_000, 50_000, 75_000,
	100_000, 150_000, 200_000, 300_000, 500_000, 750_000,
	1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000,
	100_000_000, 200_000_000, 500_000_000, 1_000_000_000,
}

// Message size buckets are powers of two from 64 bytes to 1 MiB (which
// holds MaxMessage), so the bucket of a length is a bit count.
const (
	minSizeShift = 6
	maxSizeShift = 20
)

var sizeBounds = func() []uint64 {
	b := make([]uint64, 0, maxSizeShift-minSizeShift+1)
	for s := minSizeShift; s <= maxSizeShift; s++ {
		b = append(b, 1<<s)
	}
	return b
}()

// hist is a live histogram. Its buckets are allocated once, by init.
type hist struct {
	bounds []uint64 // shared, never modified
	counts []uint64
	sum    uint64
}

func (h *hist) init(bounds []uint64) {
	h.bounds = bounds
	h.counts = make([]uint64, len(bounds)+1)
}

// add counts value v in bucket i.
func (h *hist) add(i int, v uint64) {
	h.counts[i]++
	h.sum += v
}

// snapshot copies the histogram.
func (h *hist) snapshot() contract.Histogram {
	s := contract.Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.counts))}
	for i, n := range h.counts {
		s.Counts[i] = n
		s.Count += n
	}
	s.Sum = h.sum
	return s
}

// bucketOf returns the index of the first bound at or above v (len(bounds)
// when there is none), by binary search.
func bucketOf(bounds []uint64, v uint64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bounds[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// sizeBucket is bucketOf(sizeBounds, n) in constant time.
func sizeBucket(n uint64) int {
	if n <= 1<<minSizeShift {
		return 0
	}
	return min(bits.Len64(n-1)-minSizeShift, len(sizeBounds))
}

// histograms are an endpoint's histograms.
type histograms struct {
	// latency of client RPCs, Send to the complete response, by size
	// class.
	latency [contract.NumSizeClasses]hist
	// sizes of the messages sent and received, by kind.
	sizes [contract.NumDirections][contract.NumKinds]hist
}

func (h *histograms) init() {
	for i := range h.latency {
		h.latency[i].init(latencyBounds)
	}
	for d := range h.sizes {
		for k := range h.sizes[d] {
			h.sizes[d][k].init(sizeBounds)
		}
	}
}

// rpcDone records the latency d of a client RPC whose larger message has
// n bytes.
func (h *histograms) rpcDone(n uint32, d time.Duration) {
	v := uint64(max(d, 0))
	h.latency[contract.SizeClassOf(int(n))].add(bucketOf(latencyBounds, v), v)
}

// message records a message of n bytes.
func (h *histograms) message(dir contract.Direction, k contract.Kind, n int) {
	v := uint64(n)
	h.sizes[dir][k].add(sizeBucket(v), v)
}
