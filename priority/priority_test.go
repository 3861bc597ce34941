package priority

import (
	"math"
	"math/bits"
	"testing"
)

func TestPriority(t *testing.T) {
	draft := Cutoffs{Values: [Levels]uint32{MaxMessage, 500_000, 100_000, 20_000, 5_000, 1_500, 500, 100}}
	tests := []struct {
		name   string
		c      Cutoffs
		length uint32
		want   uint8
	}{
		{"linux empty message", Default, 0, 7},
		{"linux 1", Default, 1, 7},
		{"linux 200", Default, 200, 7},
		{"linux 201", Default, 201, 6},
		{"linux 2800", Default, 2800, 6},
		{"linux 2801", Default, 2801, 5},
		{"linux 15000", Default, 15_000, 5},
		{"linux 15001", Default, 15_001, 4},
		{"linux 40000", Default, 40_000, 4},
		{"linux max message", Default, MaxMessage, 4},
		{"linux beyond max", Default, MaxMessage + 1, 0},
		{"linux max uint32", Default, math.MaxUint32, 0},
		{"draft 100", draft, 100, 7},
		{"draft 101", draft, 101, 6},
		{"draft 1500", draft, 1500, 5},
		{"draft 5000", draft, 5000, 4},
		{"draft 20000", draft, 20_000, 3},
		{"draft 100000", draft, 100_000, 2},
		{"draft 100001", draft, 100_001, 1},
		{"draft max message", draft, MaxMessage, 0},
		{"draft beyond max", draft, MaxMessage + 1, 0},
		{"zero cutoffs, empty message", Cutoffs{}, 0, 7},
		{"zero cutoffs", Cutoffs{}, 1, 0},
		{"all max", Cutoffs{Values: [Levels]uint32{7: math.MaxUint32}}, math.MaxUint32, 7},
		{"not monotonic: largest i wins", Cutoffs{Values: [Levels]uint32{9, 9, 1, 9, 1, 1, 1, 1}}, 5, 3},
	}
	for _, tt := range tests {
		if got := tt.c.Priority(tt.length); got != tt.want {
			t.Errorf("%s: Priority(%d) = %d, want %d", tt.name, tt.length, got, tt.want)
		}
	}
}

func TestStale(t *testing.T) {
	tests := []struct {
		name          string
		ours, peers   uint16
		lastSent, now uint64
		want          bool
	}{
		{"same version", 3, 3, NeverSent, 10, false},
		{"same version, sent this tick", 3, 3, 10, 10, false},
		{"differs, never sent", 3, 2, NeverSent, 10, true},
		{"differs, never sent, tick 0", 3, 0, NeverSent, 0, true},
		{"differs, sent this tick", 3, 2, 10, 10, false},
		{"differs, sent last tick", 3, 2, 9, 10, true},
		{"peer newer (we restarted)", 2, 3, 9, 10, true},
	}
	for _, tt := range tests {
		if got := Stale(tt.ours, tt.peers, tt.lastSent, tt.now); got != tt.want {
			t.Errorf("%s: Stale(%d, %d, %d, %d) = %v, want %v",
				tt.name, tt.ours, tt.peers, tt.lastSent, tt.now, got, tt.want)
		}
	}
}

func TestDefault(t *testing.T) {
	want := [Levels]uint32{0, 0, 0, 0, 1_000_000, 15_000, 2_800, 200}
	if Default.Values != want || Default.Version != 1 {
		t.Fatalf("Default = %+v, want %v version 1", Default, want)
	}
}

// TestBuckets checks the histogram layout on every length up to
// MaxMessage: buckets are contiguous and in order, bucketMax is the last
// length of its bucket, and no bucket is wider than 1/subBuckets of its
// smallest length (or one length).
func TestBuckets(t *testing.T) {
	if maxBits != bits.Len32(MaxMessage) {
		t.Fatalf("maxBits = %d, want %d", maxBits, bits.Len32(MaxMessage))
	}
	if b := bucketOf(MaxMessage); b >= numBuckets {
		t.Fatalf("bucketOf(MaxMessage) = %d, numBuckets %d", b, numBuckets)
	}
	if b := bucketOf(1<<maxBits - 1); b != numBuckets-1 {
		t.Fatalf("bucketOf(2^maxBits-1) = %d, want the last bucket %d", b, numBuckets-1)
	}
	first := uint32(0) // smallest length of the current bucket
	for n := uint32(1); n < 1<<maxBits; n++ {
		prev, b := bucketOf(n-1), bucketOf(n)
		switch {
		case b == prev:
			continue
		case b != prev+1:
			t.Fatalf("bucketOf(%d) = %d after bucket %d", n, b, prev)
		case bucketMax(prev) != n-1:
			t.Fatalf("bucketMax(%d) = %d, want %d", prev, bucketMax(prev), n-1)
		case uint64(n-first)*subBuckets > uint64(max(first, subBuckets)):
			t.Fatalf("bucket %d holds %d..%d: too wide", prev, first, n-1)
		}
		first = n
	}
	if got := bucketMax(numBuckets - 1); got != 1<<maxBits-1 {
		t.Fatalf("bucketMax(last) = %d", got)
	}
}

func TestNextVersion(t *testing.T) {
	for _, c := range [][2]uint16{{1, 2}, {2, 3}, {1000, 1001}, {math.MaxUint16, 2}, {0, 2}} {
		if got := nextVersion(c[0]); got != c[1] {
			t.Errorf("nextVersion(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}
