// Package rpctcp serves net/rpc over a TCP loopback connection: the
// baseline the benchmarks of the RPC layers over Homa compare with.
package rpctcp

import (
	"net"
	"net/rpc"
	"sync"
)

// Start serves rcvr, registered with a net/rpc server of its own, on a
// TCP loopback listener, and returns a client of it and the function
// that stops both.
func Start(rcvr any) (*rpc.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := rpc.NewServer()
	if err := srv.Register(rcvr); err != nil {
		ln.Close()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed
			}
			wg.Go(func() { srv.ServeConn(conn) })
		}
	})
	c, err := rpc.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		wg.Wait()
		return nil, nil, err
	}
	return c, func() { c.Close(); ln.Close(); wg.Wait() }, nil
}
