package resend

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestMissing(t *testing.T) {
	tests := []struct {
		name  string
		have  []Span
		limit uint32
		want  Span
		ok    bool
	}{
		{"nothing, limit 0", nil, 0, Span{}, false},
		{"nothing", nil, 100, Span{0, 100}, true},
		{"all", []Span{{0, 100}}, 100, Span{}, false},
		{"more than granted", []Span{{0, 150}}, 100, Span{}, false},
		{"gap at start", []Span{{10, 100}}, 100, Span{0, 10}, true},
		{"gap in middle", []Span{{0, 10}, {20, 100}}, 100, Span{10, 20}, true},
		{"gap at end", []Span{{0, 60}}, 100, Span{60, 100}, true},
		{"first of two gaps", []Span{{0, 10}, {20, 30}, {40, 50}}, 100, Span{10, 20}, true},
		{"limit inside a span", []Span{{0, 10}, {20, 30}}, 25, Span{10, 20}, true},
		{"limit inside a gap", []Span{{0, 10}, {20, 30}}, 15, Span{10, 15}, true},
		{"limit at a gap start", []Span{{0, 10}, {20, 30}}, 10, Span{}, false},
		{"limit 0 with data", []Span{{0, 10}}, 0, Span{}, false},
		{"gap beyond limit", []Span{{0, 10}, {20, 30}}, 5, Span{}, false},
		{"adjacent spans", []Span{{0, 10}, {10, 20}}, 30, Span{20, 30}, true},
		{"empty spans ignored", []Span{{0, 10}, {12, 12}, {15, 20}}, 30, Span{10, 15}, true},
		{"overlap tolerated", []Span{{0, 10}, {5, 20}}, 30, Span{20, 30}, true},
		{"contained span tolerated", []Span{{0, 20}, {5, 10}}, 30, Span{20, 30}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Missing(tc.have, tc.limit)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Missing(%v, %d) = %v, %v; want %v, %v", tc.have, tc.limit, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestMissingModel compares Missing with a bitmap of received bytes.
func TestMissingModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bits := rapid.SliceOfN(rapid.Bool(), 0, 64).Draw(t, "bits")
		limit := rapid.Uint32Range(0, uint32(len(bits))+8).Draw(t, "limit")
		have, got := drawSpans(t, bits)

		gap, ok := Missing(have, limit)
		first := uint32(0)
		for first < limit && got(first) {
			first++
		}
		if first == limit {
			if ok {
				t.Fatalf("Missing(%v, %d) = %v, but all is here", have, limit, gap)
			}
			return
		}
		end := first
		for end < limit && !got(end) {
			end++
		}
		if !ok || gap != (Span{first, end}) {
			t.Fatalf("Missing(%v, %d) = %v, %v; want %v", have, limit, gap, ok, Span{first, end})
		}
	})
}

func TestMissingAllocs(t *testing.T) {
	have := []Span{{0, 10}, {20, 30}, {40, 50}}
	allocs := testing.AllocsPerRun(1000, func() {
		Missing(have, 45)
	})
	if allocs != 0 {
		t.Errorf("Missing allocates %.1f times per run", allocs)
	}
}

// TestGapsModel compares Gaps with the maximal runs of missing bytes in a
// bitmap, and checks that it stops when dst is full.
func TestGapsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bits := rapid.SliceOfN(rapid.Bool(), 0, 64).Draw(t, "bits")
		limit := rapid.Uint32Range(0, uint32(len(bits))+8).Draw(t, "limit")
		have, got := drawSpans(t, bits)
		var want []Span
		for i := uint32(0); i < limit; i++ {
			if got(i) {
				continue
			}
			j := i
			for j < limit && !got(j) {
				j++
			}
			want = append(want, Span{i, j})
			i = j
		}
		all := Gaps(have, limit, make([]Span, 0, 64))
		if !slices.Equal(all, want) {
			t.Fatalf("Gaps(%v, %d) = %v, want %v", have, limit, all, want)
		}
		n := rapid.IntRange(0, 4).Draw(t, "cap")
		if some := Gaps(have, limit, make([]Span, 0, n)); !slices.Equal(some, want[:min(n, len(want))]) {
			t.Fatalf("Gaps with room for %d = %v, want %v", n, some, want[:min(n, len(want))])
		}
	})
}

// drawSpans turns a bitmap of received bytes into the span list a
// receiver keeps, each run cut at random into adjacent spans, and returns
// it with a lookup of the bitmap.
func drawSpans(t *rapid.T, bits []bool) ([]Span, func(uint32) bool) {
	var have []Span
	for i := 0; i < len(bits); i++ {
		if !bits[i] {
			continue
		}
		j := i + 1
		for j < len(bits) && bits[j] && !rapid.Bool().Draw(t, "cut") {
			j++
		}
		have = append(have, Span{uint32(i), uint32(j)})
		i = j - 1
	}
	return have, func(i uint32) bool { return int(i) < len(bits) && bits[i] }
}
