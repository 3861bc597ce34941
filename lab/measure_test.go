package lab

import (
	"slices"
	"testing"
)

// TestComparisons: homa is the reference when it ran, else the first
// protocol that did; failed runs are compared with nothing.
func TestComparisons(t *testing.T) {
	ok := func(proto string, s50 float64) Summary {
		s := Summary{Proto: proto}
		s.Short.Slowdown50 = s50
		return s
	}
	failed := Summary{Proto: "homa-udp", Error: "exit status 1"}
	pairs := func(cs []Comparison) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.First+"/"+c.Second)
		}
		return out
	}
	for _, tt := range []struct {
		sums []Summary
		want []string
	}{
		{[]Summary{ok("tcp", 4), ok("homa", 2), ok("grpc", 8)}, []string{"homa/tcp", "homa/grpc"}},
		{[]Summary{failed, ok("tcp", 4), ok("grpc", 8)}, []string{"tcp/grpc"}},
		{[]Summary{ok("homa", 2), failed}, nil},
		{[]Summary{failed}, nil},
	} {
		if got := pairs(Comparisons(tt.sums)); !slices.Equal(got, tt.want) {
			t.Errorf("comparisons %v, want %v", got, tt.want)
		}
	}
	if c := Comparisons([]Summary{ok("homa", 2), ok("tcp", 4)}); c[0].Slowdown50 != 2 {
		t.Errorf("tcp's slowdown over homa's: %v, want 2", c[0].Slowdown50)
	}
}
