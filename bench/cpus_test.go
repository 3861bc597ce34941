package bench

import (
	"slices"
	"testing"
)

// TestSplitCPUs: the clients take the first half of the CPUs allowed,
// the server the rest (the extra one of an odd count); fewer than two
// cannot be split.
func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		allowed, clients, server []int
		list                     string
	}{
		{[]int{0, 1}, []int{0}, []int{1}, "0-1"},
		{[]int{0, 1, 2}, []int{0}, []int{1, 2}, "0-2"},
		{[]int{2, 3, 5, 6, 7, 9}, []int{2, 3, 5}, []int{6, 7, 9}, "2-3,5-7,9"},
	} {
		s, err := splitCPUs(tc.allowed)
		if err != nil || !slices.Equal(s.clients, tc.clients) || !slices.Equal(s.server, tc.server) {
			t.Errorf("split of %v: %v, %v, %v; want %v, %v", tc.allowed, s.clients, s.server, err, tc.clients, tc.server)
		}
		if got := cpuList(tc.allowed); got != tc.list {
			t.Errorf("cpuList(%v) = %q, want %q", tc.allowed, got, tc.list)
		}
		// The halves are the caller's to keep: appending to the clients'
		// must not write over the server's.
		_ = append(s.clients, -1)
		if !slices.Equal(s.server, tc.server) {
			t.Errorf("appending to the clients' CPUs changed the server's: %v", s.server)
		}
	}
	if _, err := splitCPUs([]int{4}); err == nil {
		t.Error("one CPU was split")
	}
}
