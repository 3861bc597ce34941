package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/homa-go/homa/bench"

	"github.com/homa-go/homa/sock"
)

// runDemo is "homa demo": an echo server and a client on 127.0.0.1 in one
// process, over raw IP if permitted and UDP encapsulation otherwise (or
// with --udp).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "[--udp] [--size N] [--count N] [--warmup N] [--timeout D] [--metrics HOST:PORT]", stderr)
	var load loadFlags
	load.register(fs, 1000, 0)
	var met metricsFlag
	met.register(fs)
	udp := fs.Bool("udp", false, "carry Homa in UDP datagrams (no CAP_NET_RAW needed); without it the demo uses raw IP if it may")
	if code := parseFlags(fs, args, func() error { return errors.Join(load.check(), met.check()) }); code >= 0 {
		return code
	}
	host := netip.MustParseAddr("127.0.0.1")
	transport := sock.Raw
	if *udp {
		transport = sock.UDP
	}
	c, err := bench.HomaLoopback(ctx, host, transport)
	if errors.Is(err, sock.ErrPermission) {
		fmt.Fprintln(stderr, "homa: "+bench.NoRaw+"; falling back to UDP encapsulation")
		c, err = bench.HomaLoopback(ctx, host, sock.UDP)
	}
	if err != nil {
		return fail(stderr, "demo", err)
	}
	fmt.Fprintf(stdout, "homa: echo server on %v (%s)\n", c.Remote(), bench.TransportName(c.Transport()))
	ms, err := met.serve(stdout, namedSocket{"server", c.ServerSocket()}, namedSocket{"client", c.Socket()})
	if err != nil {
		c.Close()
		return fail(stderr, "demo", err)
	}
	return ms.stop(pingReport(ctx, "demo", c, load, stdout, stderr), "demo", stderr)
}
