package dcsim

import "math/bits"

// pool recycles byte slices in power-of-two size classes, for the cores'
// packets and messages and the fabric's datagrams. The simulation runs on
// one goroutine, so it needs no lock (core.Buffers asks for safety from
// any goroutine only because a shell's applications release messages
// concurrently). Each class keeps at most poolKeep bytes of free slices.
type pool struct {
	free [32][][]byte
}

const (
	poolMinShift = 6 // 64 bytes
	poolKeep     = 16 << 20
)

func class(n int) int {
	if n <= 1<<poolMinShift {
		return poolMinShift
	}
	return bits.Len(uint(n - 1))
}

// Get returns a slice of length n (its contents are not cleared).
func (p *pool) Get(n int) []byte {
	c := class(n)
	if c >= len(p.free) {
		return make([]byte, n)
	}
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// Put takes back a slice from Get; others are left to the collector.
func (p *pool) Put(b []byte) {
	c := bits.Len(uint(cap(b))) - 1
	if cap(b) == 0 || cap(b) != 1<<c || c < poolMinShift || c >= len(p.free) {
		return
	}
	if (len(p.free[c])+1)<<c > poolKeep {
		return
	}
	p.free[c] = append(p.free[c], b[:cap(b)])
}
