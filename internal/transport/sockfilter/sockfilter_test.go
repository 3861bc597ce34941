//go:build linux

package sockfilter

import (
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestAttach: a filter that drops everything keeps a datagram out of a
// socket; one that keeps everything lets it in.
func TestAttach(t *testing.T) {
	for _, keep := range []bool{false, true} {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		val := uint32(0)
		if keep {
			val = 0xffff
		}
		f, err := Assemble([]bpf.Instruction{bpf.RetConstant{Val: val}})
		if err != nil || len(f) != 1 {
			t.Fatalf("Assemble: %v, %d instructions", err, len(f))
		}
		if err := Attach(fds[1], f); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fds[0], []byte("x")); err != nil {
			t.Fatal(err)
		}
		var b [4]byte
		n, _, err := unix.Recvfrom(fds[1], b[:], unix.MSG_DONTWAIT)
		if got := err == nil && n == 1; got != keep {
			t.Errorf("keep %v: received %d bytes, %v", keep, n, err)
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
}
