package homa_test

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkReceiveStorage compares, per 1 MB message arriving in 64 KB
// packets, what receiving its first quarter in place would cost with
// what that quarter's copy costs now (see "Not yet built" in
// docs/design.md). A message commits its whole buffer once a quarter of
// it has arrived and copies that quarter into it from the packets'
// receive buffers: "quarter-copy". Landing every packet from the first
// would need storage whose memory is committed as bytes arrive, not
// before: address space reserved with mmap, whose pages the copies into
// it commit, one page fault each ("mmap-fresh": map, fill, unmap), or a
// reserved region reused after MADV_DONTNEED (the pages go back to the
// system and are faulted in again) or MADV_FREE (the system may take
// them back under pressure; until then a write keeps them). "pooled" is
// the copies into a pooled buffer whose memory stays committed, as
// landing does today after the quarter: the floor of all of them.
//
//	go test -run '^$' -bench ReceiveStorage ./homa
func BenchmarkReceiveStorage(b *testing.B) {
	const (
		size   = 1 << 20
		packet = 64 << 10
	)
	src := make([]byte, packet)
	fill := func(dst []byte, n int) {
		for off := 0; off < n; off += packet {
			copy(dst[off:], src)
		}
	}
	reserve := func(b *testing.B) []byte {
		m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			b.Skipf("mmap: %v", err)
		}
		return m
	}
	b.Run("pooled", func(b *testing.B) {
		buf := make([]byte, size)
		fill(buf, size)
		b.SetBytes(size)
		for b.Loop() {
			fill(buf, size)
		}
	})
	b.Run("quarter-copy", func(b *testing.B) {
		buf := make([]byte, size)
		fill(buf, size)
		b.SetBytes(size)
		for b.Loop() {
			fill(buf, size/4)
		}
	})
	b.Run("mmap-fresh", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			m := reserve(b)
			fill(m, size)
			if err := unix.Munmap(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, advice := range []struct {
		name string
		v    int
	}{{"madv-dontneed", unix.MADV_DONTNEED}, {"madv-free", unix.MADV_FREE}} {
		b.Run(advice.name, func(b *testing.B) {
			m := reserve(b)
			defer unix.Munmap(m)
			b.SetBytes(size)
			for b.Loop() {
				fill(m, size)
				if err := unix.Madvise(m, advice.v); err != nil {
					b.Skipf("madvise: %v", err)
				}
			}
		})
	}
}
