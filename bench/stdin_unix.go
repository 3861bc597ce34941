//go:build unix

package bench

import (
	"io"
	"os"
	"syscall"
)

// ParentInput is a server child's standard input, for AnswerParent, read
// through the runtime's network poller. The pipe a child inherits
// blocks, and a goroutine blocked reading it holds its processor in a
// system call until the runtime's monitor takes the processor back,
// which it does only every 10 ms once the process has been idle a
// while: with GOMAXPROCS 1 (a child confined to one CPU) a goroutine
// that a packet readied meanwhile waited that long to run.
func ParentInput() io.Reader {
	if f, err := pollable(0, "/dev/stdin"); err == nil {
		return f
	}
	return os.Stdin
}

// pollable is a file for descriptor fd whose reads park in the runtime's
// poller rather than block in a system call.
func pollable(fd int, name string) (*os.File, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
