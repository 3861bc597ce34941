package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/homa-go/homa/bench"

	"github.com/homa-go/homa/sock"
)

// runPing is "homa ping": one RPC at a time to an echo server, every echo
// checked, then a latency and throughput report.
func runPing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ping", "[--addr HOST:PORT] [--size N] [--count N] [--warmup N] [--timeout D] [--udp] [--metrics HOST:PORT]", stderr)
	addr := fs.String("addr", "127.0.0.1:4000", "echo server `HOST:PORT` (a Homa server port, 1..32767)")
	udp := fs.Bool("udp", false, "carry Homa in UDP datagrams (the server must use --udp too)")
	var load loadFlags
	load.register(fs, 1000, 0)
	var met metricsFlag
	met.register(fs)
	if code := parseFlags(fs, args, func() error { return errors.Join(load.check(), met.check(), checkServerAddr(*addr)) }); code >= 0 {
		return code
	}
	dst, err := resolve(ctx, *addr)
	if err != nil {
		return fail(stderr, "ping", bench.RemoteError(*addr, err))
	}
	c, err := bench.DialHoma(dst, &sock.Config{Transport: transportFor(*udp)})
	if err != nil {
		return fail(stderr, "ping", bench.OpenError(bench.LocalFor(dst), err))
	}
	fmt.Fprintf(stdout, "homa: ping %v from %v over %s\n", dst, c.Socket().LocalAddr(), bench.TransportName(c.Transport()))
	ms, err := met.serve(stdout, namedSocket{"client", c.Socket()})
	if err != nil {
		c.Close()
		return fail(stderr, "ping", err)
	}
	return ms.stop(pingReport(ctx, "ping", c, load, stdout, stderr), "ping", stderr)
}

// checkServerAddr checks that addr, where requests go, has the form
// HOST:PORT with a Homa server port.
func checkServerAddr(addr string) error {
	port, err := parsePort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("--addr %q: %v", addr, err)
	case port < 1 || port > sock.MaxServerPort:
		return fmt.Errorf("--addr %s: port %d is not a Homa server port (1..%d)", addr, port, sock.MaxServerPort)
	}
	return nil
}

// pingReport measures through c, closes it, and prints the report of ping
// and demo. It returns the exit code.
func pingReport(ctx context.Context, name string, c *bench.HomaClient, load loadFlags, stdout, stderr io.Writer) int {
	s, err := bench.Ping(ctx, c, load.load())
	err = errors.Join(err, c.Close())
	if s.Count > 0 {
		fmt.Fprintf(stdout, "homa: %d round trips of %d bytes to %v over %s\n", s.Count, s.Size, c.Remote(), bench.TransportName(c.Transport()))
		writeReport(stdout, s)
	}
	if errors.Is(err, sock.ErrPeerTimeout) || errors.Is(err, sock.ErrNoListener) || errors.Is(err, sock.ErrHostUnreachable) || errors.Is(err, sock.ErrBadAddress) {
		err = bench.RemoteError(c.Remote(), err)
	}
	if err != nil {
		return fail(stderr, name, err)
	}
	return 0
}

// writeReport prints the latency and throughput lines of ping and demo.
func writeReport(w io.Writer, s bench.Summary) {
	fmt.Fprintf(w, "rtt µs: min %.1f  median %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
		micros(s.Min), micros(s.Median), micros(s.P99), micros(s.P999), micros(s.Max))
	fmt.Fprintf(w, "throughput: %.0f RPCs/s, %.2f Mbit/s of payload each way\n", s.Rate(), s.Mbps())
}

// micros converts a duration to microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
