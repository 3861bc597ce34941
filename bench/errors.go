package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/homa-go/homa/sock"
)

// The errors of a run name the address at fault: the local one a server
// or client socket is opened on, or the remote one requests go to. They
// keep what they wrap (errors.Is and errors.As see it).

// NoRaw is how bench names a refused raw socket.
const NoRaw = "raw IP sockets not permitted (need CAP_NET_RAW)"

// rawAdvice says what to do about a refused raw socket.
func rawAdvice() string {
	return "run as root, grant it with \"" + SetcapCommand() + "\", or pass --udp for UDP encapsulation"
}

// SetcapCommand is the command that grants this program raw sockets:
// setcap on the path of its executable. A program run by "go run" is
// deleted when it exits, so for one the command says to build it first.
func SetcapCommand() string {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "setcap cap_net_raw+ep $(command -v homa)"
	}
	return setcapFor(exe)
}

// setcapFor is SetcapCommand for the executable exe.
func setcapFor(exe string) string {
	switch {
	case strings.Contains(exe, string(filepath.Separator)+"go-build"):
		return "go build ./cmd/homa && setcap cap_net_raw+ep ./homa"
	case strings.ContainsAny(exe, " '\"$`\\"):
		return "setcap cap_net_raw+ep " + strconv.Quote(exe)
	}
	return "setcap cap_net_raw+ep " + exe
}

// rawRefused is a refused raw socket, with advice.
type rawRefused struct{ err error }

func (e rawRefused) Error() string { return NoRaw + ": " + rawAdvice() }
func (e rawRefused) Unwrap() error { return e.err }

// addrError is a failure that concerns one address.
type addrError struct {
	side string // "local" or "remote"
	addr string
	err  error
}

func (e *addrError) Error() string {
	return fmt.Sprintf("%s address %s: %s", e.side, e.addr, explain(e.side, e.err))
}

func (e *addrError) Unwrap() error { return e.err }

// OpenError explains why a socket, listener or server could not be
// opened on the local address addr (or why addr, as given, does not
// resolve). A refused raw socket gets advice instead, since no address
// would do better.
func OpenError(addr any, err error) error {
	if errors.Is(err, sock.ErrPermission) {
		return rawRefused{err}
	}
	return &addrError{side: "local", addr: fmt.Sprint(addr), err: err}
}

// RemoteError is a failure of the requests sent to addr, or of resolving
// it.
func RemoteError(addr any, err error) error {
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
	return err.Error()
}
