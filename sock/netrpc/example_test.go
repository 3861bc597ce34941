package netrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"net/rpc"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// Operands are the arguments of the Calculator service.
type Operands struct{ A, B int }

// Calculator is an ordinary net/rpc service: nothing in it knows about
// Homa.
type Calculator struct{}

// Multiply sets product to A*B.
func (Calculator) Multiply(args *Operands, product *int) error {
	*product = args.A * args.B
	return nil
}

// Divide sets quotient to A/B, or fails when B is zero.
func (Calculator) Divide(args *Operands, quotient *int) error {
	if args.B == 0 {
		return errors.New("divide by zero")
	}
	*quotient = args.A / args.B
	return nil
}

// A net/rpc server and client talking over Homa. UDP encapsulation needs
// no privileges; leave the Config out for Homa over IP.
func Example() {
	cfg := &sock.Config{Transport: sock.UDP}
	server := rpc.NewServer()
	if err := server.Register(Calculator{}); err != nil {
		log.Fatal(err)
	}
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:27311"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		netrpc.Serve(server, s) // until s is closed
	}()
	defer func() { s.Close(); <-served }()

	client, err := netrpc.Dial(s.LocalAddr(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var product int
	if err := client.Call("Calculator.Multiply", &Operands{7, 8}, &product); err != nil {
		log.Fatal(err)
	}
	fmt.Println("7*8 =", product)

	var quotient int
	err = client.Call("Calculator.Divide", &Operands{1, 0}, &quotient)
	var serverErr rpc.ServerError
	fmt.Println("1/0:", err, errors.As(err, &serverErr))
	// Output:
	// 7*8 = 56
	// 1/0: divide by zero true
}

// A server that stops gracefully: Shutdown lets the calls running
// finish and refuses new ones; Config raises the largest message.
func ExampleServer_Shutdown() {
	cfg := &sock.Config{Transport: sock.UDP}
	limits := &netrpc.Config{MaxMessage: 16 << 20}
	rs := rpc.NewServer()
	if err := rs.Register(Calculator{}); err != nil {
		log.Fatal(err)
	}
	s, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:27312"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	srv := netrpc.NewServer(rs, s, limits)
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()

	client, err := netrpc.DialConfig(s.LocalAddr(), cfg, limits)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	var product int
	if err := client.Call("Calculator.Multiply", &Operands{6, 7}, &product); err != nil {
		log.Fatal(err)
	}
	fmt.Println("6*7 =", product)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("Serve:", <-served)
	// Output:
	// 6*7 = 42
	// Serve: netrpc: server closed
}
