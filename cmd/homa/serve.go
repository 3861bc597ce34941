package main

import (
	"context"
	"fmt"
	"io"

	"github.com/homa-go/homa/sock"
)

// runServe is "homa serve": an echo server until ctx ends (SIGINT or
// SIGTERM).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "[--addr HOST:PORT] [--udp]", stderr)
	addr := fs.String("addr", "127.0.0.1:4000", "local `HOST:PORT` to serve on (port 1..32767)")
	udp := fs.Bool("udp", false, "carry Homa in UDP datagrams (no CAP_NET_RAW needed; clients must use --udp too)")
	if code := parseFlags(fs, args, func() error { return nil }); code >= 0 {
		return code
	}
	local, err := resolve(ctx, *addr)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	t := transportFor(*udp)
	s, err := openSocket(local, &sock.Config{Transport: t})
	if err != nil {
		return fail(stderr, "serve", explainOpen(err))
	}
	e := startEcho(ctx, s)
	fmt.Fprintf(stdout, "homa: echo server on %v (%s)\n", s.LocalAddr(), transportName(t))
	<-ctx.Done()
	if err := e.close(); err != nil {
		return fail(stderr, "serve", err)
	}
	fmt.Fprintf(stdout, "homa: echo server stopped after %d requests\n", e.served.Load())
	return 0
}
