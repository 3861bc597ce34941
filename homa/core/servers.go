package core

import (
	"encoding/binary"
	"net/netip"
)

// servers maps (client host, id) to the server RPCs. A Go map keyed by
// that pair hashes and compares an address at every lookup, and a
// request's path looks up several times (its DATA, the reply, the
// acknowledgment, the removal). So the key is the id mixed with a keyed
// hash of the address, a uint64, which the map handles fastest; the
// RPCs of pairs whose keys collide chain through sameKey. A peer cannot
// aim at collisions, or grow a chain, without the seed.
type servers struct {
	m    map[uint64]*rpc
	seed uint64
	n    int
}

func newServers(seed uint64) servers {
	if seed == 0 {
		seed = 0x9e3779b97f4a7c15
	}
	return servers{m: make(map[uint64]*rpc), seed: seed}
}

// key mixes id with addr's keyed hash.
func (s *servers) key(addr netip.Addr, id uint64) uint64 {
	var x uint64
	if addr.Is4() {
		a := addr.As4()
		x = uint64(binary.LittleEndian.Uint32(a[:]))
	} else {
		a := addr.As16()
		x = binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(a[8:])*0x9e3779b97f4a7c15
	}
	x = (x ^ s.seed) * 0xbf58476d1ce4e5b9
	return id ^ x ^ x>>31
}

// get returns the server RPC of host addr's client id, or nil.
func (s *servers) get(addr netip.Addr, id uint64) *rpc {
	r := s.m[s.key(addr, id)]
	for r != nil && (r.id != id || r.peer.addr != addr) {
		r = r.sameKey
	}
	return r
}

// add enters r, which must not be in the table.
func (s *servers) add(r *rpc) {
	k := s.key(r.peer.addr, r.id)
	r.sameKey = s.m[k]
	s.m[k] = r
	s.n++
}

// remove takes r out of the table, if it is there.
func (s *servers) remove(r *rpc) {
	k := s.key(r.peer.addr, r.id)
	if head := s.m[k]; head == r {
		if r.sameKey == nil {
			delete(s.m, k)
		} else {
			s.m[k] = r.sameKey
		}
	} else {
		p := head
		for p != nil && p.sameKey != r {
			p = p.sameKey
		}
		if p == nil {
			return
		}
		p.sameKey = r.sameKey
	}
	r.sameKey = nil
	s.n--
}

// len is the number of server RPCs.
func (s *servers) len() int { return s.n }

// all lists the server RPCs, for Close.
func (s *servers) all() []*rpc {
	rs := make([]*rpc, 0, s.n)
	for _, r := range s.m {
		for ; r != nil; r = r.sameKey {
			rs = append(rs, r)
		}
	}
	return rs
}
