// Package sockfilter assembles classic BPF programs and attaches them
// to sockets (SO_ATTACH_FILTER): the raw sockets of the engine, of the
// raw-socket floor and of the attack scripts each keep only their own
// packets this way.
package sockfilter

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Assemble turns prog into the kernel's form.
func Assemble(prog []bpf.Instruction) ([]unix.SockFilter, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f, nil
}

// Attach installs filter on the socket fd, replacing any before it.
func Attach(fd int, filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
}
