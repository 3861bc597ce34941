package core

import (
	"net/netip"
	"testing"
)

// TestServersCollisions: RPCs whose keys collide in the server table
// are all found, and each removal leaves the others in place.
func TestServersCollisions(t *testing.T) {
	s := newServers(12345)
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::7")}
	// ids chosen so that all three keys are those of (addrs[0], 41).
	want := s.key(addrs[0], 41)
	var rs []*rpc
	for _, a := range addrs {
		id := want ^ s.key(a, 0)
		r := &rpc{id: id, peer: &peer{addr: a}}
		s.add(r)
		rs = append(rs, r)
	}
	other := &rpc{id: 43, peer: &peer{addr: addrs[0]}}
	s.add(other)
	if len(s.m) != 2 || s.len() != 4 {
		t.Fatalf("%d keys, %d RPCs; want 2 keys (three colliding), 4 RPCs", len(s.m), s.len())
	}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}} {
		for _, r := range rs {
			if r.sameKey != nil || s.get(r.peer.addr, r.id) != nil {
				s.remove(r)
			}
		}
		for _, r := range rs {
			s.add(r)
		}
		for i, k := range order {
			s.remove(rs[k])
			s.remove(rs[k]) // a second removal changes nothing
			if got := s.get(rs[k].peer.addr, rs[k].id); got != nil {
				t.Fatalf("order %v: removed RPC %d still found", order, k)
			}
			for _, j := range order[i+1:] {
				if got := s.get(rs[j].peer.addr, rs[j].id); got != rs[j] {
					t.Fatalf("order %v: after removing %d, RPC %d is %p, want %p", order, k, j, got, rs[j])
				}
			}
		}
		if s.len() != 1 || s.get(addrs[0], 43) != other {
			t.Fatalf("order %v: %d RPCs left, want only the other one", order, s.len())
		}
		if got := s.get(addrs[1], 43); got != nil {
			t.Fatal("an id found under another host's address")
		}
	}
	if all := s.all(); len(all) != 1 || all[0] != other {
		t.Fatalf("all = %v", all)
	}
}
