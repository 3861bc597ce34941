package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/homa-go/homa/sock"
)

// The command's failures are one line on stderr, "homa CMD: what went
// wrong", naming the command once and the address at fault (see
// bench.OpenError and bench.RemoteError).

// sentinels are the transport's errors whose text may carry the
// package's name, which the command's line already says.
var sentinels = []error{
	sock.ErrClosed, sock.ErrMessageTooLong, sock.ErrUnknownRPC, sock.ErrAborted,
	sock.ErrPeerTimeout, sock.ErrBadAddress, sock.ErrAlreadyReplied,
}

// message is err's text without the "homa: " that starts the text of the
// transport's sentinel errors within it: the line it goes on starts with
// "homa CMD: " already.
func message(err error) string {
	msg := err.Error()
	for _, s := range sentinels {
		text := s.Error()
		if short, ok := strings.CutPrefix(text, "homa: "); ok && errors.Is(err, s) {
			msg = strings.ReplaceAll(msg, text, short)
		}
	}
	return msg
}

// fail prints err as the one line a failing command leaves, and returns
// exit code 1. A prefix of err that repeats the command's name ("lab: "
// from package lab for "homa lab") is left out.
func fail(stderr io.Writer, name string, err error) int {
	msg := strings.TrimPrefix(message(err), name+": ")
	fmt.Fprintf(stderr, "homa %s: %s\n", name, msg)
	return 1
}
