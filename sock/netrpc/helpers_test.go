package netrpc_test

import (
	"errors"
	"net/netip"
	"net/rpc"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// testConfig is the socket configuration of every test in this package.
// Polling is off: a spinning poller would keep the fake clock of a
// synctest bubble from advancing.
func testConfig() *sock.Config {
	return &sock.Config{PollDuration: -1}
}

// Args are the arguments of Arith's methods.
type Args struct{ A, B int }

// Quotient is the reply of Arith.Divide.
type Quotient struct{ Quo, Rem int }

// Arith is a net/rpc service, written as for net/rpc over TCP.
type Arith struct{}

func (t *Arith) Multiply(args *Args, reply *int) error {
	*reply = args.A * args.B
	return nil
}

func (t *Arith) Divide(args *Args, q *Quotient) error {
	if args.B == 0 {
		return errors.New("divide by zero")
	}
	q.Quo, q.Rem = args.A/args.B, args.A%args.B
	return nil
}

// Echo returns its argument, whatever its size.
func (t *Arith) Echo(args []byte, reply *[]byte) error {
	*reply = args
	return nil
}

// Make returns n bytes.
func (t *Arith) Make(n int, reply *[]byte) error {
	*reply = make([]byte, n)
	return nil
}

// SlowMake returns n bytes after a second.
func (t *Arith) SlowMake(n int, reply *[]byte) error {
	time.Sleep(time.Second)
	*reply = make([]byte, n)
	return nil
}

// Sleep sleeps for d.
func (t *Arith) Sleep(d time.Duration, reply *int) error {
	time.Sleep(d)
	return nil
}

var (
	serverAddr = netip.MustParseAddrPort("10.0.0.1:4000")
	clientHost = netip.MustParseAddr("10.0.0.2")
)

// memWorld is a server and a client on an in-memory network.
type memWorld struct {
	nw     *memnet.Network
	server *sock.Socket
	srv    *netrpc.Server
	arith  *Arith
	served chan struct{} // closed when Serve returns
	err    error         // Serve's, once served is closed
}

// newMemWorld starts an Arith server on an in-memory network. Stop it
// with close.
func newMemWorld(t *testing.T) *memWorld {
	t.Helper()
	return newMemWorldConfig(t, nil)
}

// newMemWorldConfig is newMemWorld with the server configured by cfg.
func newMemWorldConfig(t *testing.T, cfg *netrpc.Config) *memWorld {
	t.Helper()
	w := &memWorld{nw: memnet.New(memnet.Config{}), arith: &Arith{}, served: make(chan struct{})}
	conn, err := socktest.OpenMem(w.nw, serverAddr, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	w.server = conn
	srv := rpc.NewServer()
	if err := srv.Register(w.arith); err != nil {
		t.Fatal(err)
	}
	w.srv = netrpc.NewServer(srv, w.server, cfg)
	go func() {
		defer close(w.served)
		w.err = w.srv.Serve()
	}()
	return w
}

// client opens a client socket and an rpc.Client on it to the server.
func (w *memWorld) client(t *testing.T) *rpc.Client {
	t.Helper()
	return rpc.NewClientWithCodec(w.codec(t, serverAddr))
}

// codec opens a client socket and a codec on it to dst.
func (w *memWorld) codec(t *testing.T, dst netip.AddrPort) *netrpc.ClientCodec {
	t.Helper()
	return w.codecConfig(t, dst, nil)
}

// codecConfig is codec configured by cfg.
func (w *memWorld) codecConfig(t *testing.T, dst netip.AddrPort, cfg *netrpc.Config) *netrpc.ClientCodec {
	t.Helper()
	conn, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return netrpc.NewClientCodecConfig(conn, dst, cfg)
}

// close stops the server and waits for Serve to return.
func (w *memWorld) close() {
	w.server.Close()
	<-w.served
	w.nw.Close()
}

// isServerError reports whether err is an rpc.ServerError containing
// want.
func isServerError(err error, want string) bool {
	var se rpc.ServerError
	return errors.As(err, &se) && strings.Contains(string(se), want)
}
