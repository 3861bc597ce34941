package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/homa-go/homa/sock"
)

// The command's failures are one line on stderr, "homa CMD: what went
// wrong", naming the command once and the address at fault: the local one
// a server or client socket is opened on, or the remote one requests go
// to. The errors keep what they wrap (errors.Is and errors.As see it).

// noRaw is how the command names a refused raw socket.
const noRaw = "raw IP sockets not permitted (need CAP_NET_RAW)"

// rawAdvice says what to do about a refused raw socket.
const rawAdvice = `run as root, grant it with "setcap cap_net_raw+ep homa", or pass --udp for UDP encapsulation`

// rawRefused is a refused raw socket, as the command explains it.
type rawRefused struct{ err error }

func (e rawRefused) Error() string { return noRaw + ": " + rawAdvice }
func (e rawRefused) Unwrap() error { return e.err }

// addrError is a failure that concerns one address of the command.
type addrError struct {
	side string // "local" or "remote"
	addr string
	err  error
}

func (e *addrError) Error() string {
	return fmt.Sprintf("%s address %s: %s", e.side, e.addr, explain(e.side, e.err))
}

func (e *addrError) Unwrap() error { return e.err }

// openError explains why a socket, listener or server could not be
// opened on the local address addr (or why addr, as given, does not
// resolve). A refused raw socket gets advice instead, since no address
// would do better.
func openError(addr any, err error) error {
	if errors.Is(err, sock.ErrPermission) {
		return rawRefused{err}
	}
	return &addrError{side: "local", addr: fmt.Sprint(addr), err: err}
}

// remoteError is a failure of the requests sent to addr, or of resolving
// it.
func remoteError(addr any, err error) error {
	return &addrError{side: "remote", addr: fmt.Sprint(addr), err: err}
}

// explain says in a few words what err means for an address on side.
func explain(side string, err error) string {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "not an address of this host"
	case errors.Is(err, sock.ErrPortInUse), errors.Is(err, syscall.EADDRINUSE):
		return "the port is in use by another socket on this host"
	case side == "remote" && errors.Is(err, sock.ErrNoListener):
		return "nothing listens on that Homa port (the peer's host said so): is the server running, over the same transport (--udp on both ends or neither)?"
	case side == "remote" && errors.Is(err, sock.ErrPeerTimeout):
		return "no answer (the peer timed out): is a server running there, over the same transport (--udp on both ends or neither)?"
	case side == "remote" && errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: no server listens there"
	}
	return message(err)
}

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
