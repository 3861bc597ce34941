//go:build linux

package netio

import (
	"fmt"
	"slices"

	"github.com/homa-go/homa/internal/transport/sockfilter"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Limits of port-set filters.
const (
	// maxFilterInsns is the kernel's limit on a classic BPF program
	// (BPF_MAXINSNS).
	maxFilterInsns = 4096
	// portLeaf is the most ports a leaf of a port-set filter compares
	// one after the other; above it the filter halves the set.
	portLeaf = 8
)

// portSetFilter assembles the socket filter of a raw socket shared by
// the Homa ports in ports (see rawShare): like portFilter, it passes
// packets of at least the Homa common header, here those whose
// destination port is in the set. The sorted ports are searched as a
// binary tree: each inner node compares with the first port of its upper
// half and jumps to one half, each leaf compares with up to portLeaf
// ports in turn, so a packet runs about 2 log2(n/portLeaf) + portLeaf
// instructions whatever the set's size n. A set too large for the
// kernel's limit on a program is an error.
func portSetFilter(v6 bool, ports []uint16) ([]unix.SockFilter, error) {
	const (
		accept = ^uint32(0)
		drop   = 0
	)
	ps := slices.Clone(ports)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	prog := append(homaLenPrologue(v6),
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: homaHeaderLen, SkipTrue: 1},
		bpf.RetConstant{Val: drop},
		bpf.LoadIndirect{Off: dstPortOff, Size: 2},
	)
	prog = appendPortTree(prog, ps, accept, drop)
	if len(prog) > maxFilterInsns {
		return nil, fmt.Errorf("netio: a filter for %d ports takes %d instructions, more than the kernel's %d", len(ps), len(prog), maxFilterInsns)
	}
	return sockfilter.Assemble(prog)
}

// appendPortTree appends the search of the sorted set ps for the port in
// register A, ending in RetConstant accept or drop.
func appendPortTree(prog []bpf.Instruction, ps []uint16, accept, drop uint32) []bpf.Instruction {
	if len(ps) <= portLeaf {
		for i, p := range ps {
			// Past the remaining compares and the drop, to the accept.
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(p), SkipTrue: uint8(len(ps) - i)})
		}
		return append(prog, bpf.RetConstant{Val: drop}, bpf.RetConstant{Val: accept})
	}
	mid := len(ps) / 2
	lower := appendPortTree(nil, ps[:mid], accept, drop)
	// A >= ps[mid]: on to the jump over the lower half; else into it.
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(ps[mid]), SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(lower))})
	prog = append(prog, lower...)
	return appendPortTree(prog, ps[mid:], accept, drop)
}
