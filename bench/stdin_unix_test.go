//go:build unix

package bench

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestPollableInput: the child's input is read through the runtime's
// poller (a file outside it takes no deadline), so that a goroutine
// waiting for the parent's next query holds no processor.
func TestPollableInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Blocking descriptors of the pipe's read end, as a child inherits.
	fd, err := dupBlocking(r)
	if err != nil {
		t.Fatal(err)
	}
	other, err := dupBlocking(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	// What the check below tells apart: a file of a blocking descriptor
	// takes no deadline.
	plain := os.NewFile(uintptr(other), "plain")
	err = plain.SetReadDeadline(time.Now())
	plain.Close()
	if !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("a blocking pipe took a deadline (%v): the test proves nothing", err)
	}
	f, err := pollable(fd, "input")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.SetReadDeadline(time.Now()); err != nil {
		t.Fatalf("the input is not read through the poller: %v", err)
	}
	if _, err := f.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v", err)
	}
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("cpu\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := f.Read(buf); err != nil || string(buf[:n]) != "cpu\n" {
		t.Errorf("read %q, %v", buf[:n], err)
	}
}

// dupBlocking duplicates f's descriptor and makes the copy block.
func dupBlocking(f *os.File) (int, error) {
	c, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if cerr := c.Control(func(s uintptr) { fd, err = syscall.Dup(int(s)) }); cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, err
	}
	return fd, syscall.SetNonblock(fd, false)
}
