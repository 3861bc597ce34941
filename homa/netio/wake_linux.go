package netio

import (
	"errors"
	"os"
	"time"
)

// Wake implements Waker: a read deadline in the past on the epoll
// instance the reader parks on gives it back at once; the reader clears it and returns
// ErrWoken.
func (c *sockConn) Wake() {
	if c.wake.set() {
		_ = c.pfd.SetReadDeadline(time.Unix(1, 0))
	}
}

// woken turns a read that ended because of Wake's deadline into
// ErrWoken, clearing the deadline, and reports whether the read should
// simply be retried (the deadline fired for a wake already consumed).
func (c *sockConn) woken(err error) (error, bool) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err, false
	}
	_ = c.pfd.SetReadDeadline(time.Time{})
	if c.wake.take() {
		return ErrWoken, false
	}
	return nil, true
}
