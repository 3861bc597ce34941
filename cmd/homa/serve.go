package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/sock"
)

// parsePort returns the port of HOST:PORT, which must be a number.
func parsePort(hostport string) (uint16, error) {
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q is not a number 0..65535", port)
	}
	return uint16(p), nil
}

// serveFlags are the flags of serve that choose the server.
type serveFlags struct {
	proto     string
	udp       bool
	replySize int
	shards    int
	parent    bool
	engine    engineFlags
	p         bench.Protocol // chosen by check
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.proto, "proto", "", "`protocol` to serve: "+bench.ProtocolNames(remote)+
		" (default homa, or homa-udp with --udp)")
	fs.BoolVar(&f.udp, "udp", false, "carry Homa in UDP datagrams (no CAP_NET_RAW needed; clients must use --udp too); the same as --proto homa-udp")
	fs.IntVar(&f.replySize, "reply-size", 0, "reply with `N` bytes: the first N of the request, zero-padded (0 echoes the request)")
	fs.IntVar(&f.shards, "shards", 0, fmt.Sprintf("Homa: split the server's socket into `N` engines on one port, each with a kernel socket of its own, so that N CPUs serve it at once (the socket's Shards; 0 or 1: one engine, at most %d); homa and homa-udp only", sock.MaxShards))
	fs.BoolVar(&f.parent, "parent", false, "serve a parent process (homa bench) over standard input and output: stop when standard input closes, answer \"cpu\" lines with the CPU time used")
	hide(fs, "parent")
	f.engine.register(fs)
}

func (f *serveFlags) check() error {
	name := f.proto
	switch {
	case name == "" && f.udp:
		name = "homa-udp"
	case name == "":
		name = "homa"
	case f.udp && name != "homa-udp":
		return fmt.Errorf("--udp and --proto %s disagree", name)
	}
	p, ok := bench.LookupProtocol(name)
	if !ok || p.LoopbackOnly() {
		return fmt.Errorf("--proto %q: must be one of %s", name, bench.ProtocolNames(remote))
	}
	f.p = p
	switch {
	case f.replySize < 0 || f.replySize > p.MaxSize():
		return fmt.Errorf("--reply-size %d: must be 0..%d", f.replySize, p.MaxSize())
	case f.shards < 0 || f.shards > sock.MaxShards:
		return fmt.Errorf("--shards %d: must be 0..%d", f.shards, sock.MaxShards)
	case f.shards > 1 && name != "homa" && name != "homa-udp":
		return fmt.Errorf("--shards %d: only the homa and homa-udp servers have shards, not %s", f.shards, name)
	}
	return f.engine.check()
}

// checkAddr checks the form of --addr and, for Homa, that its port is a
// server port or 0.
func (f *serveFlags) checkAddr(addr string) error {
	port, err := parsePort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if f.p.Homa() && port > sock.MaxServerPort {
		return fmt.Errorf("--addr %s: port %d is not a Homa server port (1..%d; 0 picks a free one)", addr, port, sock.MaxServerPort)
	}
	return nil
}

// announce is how serve names its server: "<proto> server on ADDR",
// or, without --proto, as it always has: "echo server on ADDR (transport)".
func (f *serveFlags) announce() (name, suffix string) {
	if f.proto != "" {
		return f.p.Name(), ""
	}
	return "echo", " (" + bench.TransportName(transportFor(f.udp)) + ")"
}

// runServe is "homa serve": a server of one protocol until ctx ends
// (SIGINT or SIGTERM).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "[--proto "+strings.ReplaceAll(bench.ProtocolNames(remote), ",", "|")+
		"] [--addr HOST:PORT] [--udp] [--reply-size N] [--shards N] [--link-mbps M] [--poll D] [--metrics HOST:PORT]", stderr)
	addr := fs.String("addr", "127.0.0.1:4000", fmt.Sprintf("local `HOST:PORT` to serve on (Homa server ports 1..32767; port 0 picks a free one, of %d..%d for Homa)", bench.FreePortFirst, bench.FreePortLast))
	var sf serveFlags
	sf.register(fs)
	var met metricsFlag
	met.register(fs)
	if code := parseFlags(fs, args, func() error { return errors.Join(sf.check(), met.check(), sf.checkAddr(*addr)) }); code >= 0 {
		return code
	}
	local, err := resolve(ctx, *addr)
	if err != nil {
		return fail(stderr, "serve", bench.OpenError(*addr, err))
	}
	eng := sf.engine.config()
	eng.Shards = sf.shards
	srv, err := bench.Serve(ctx, sf.p, local, bench.ServerOptions{ReplySize: sf.replySize, Engine: eng})
	if err != nil {
		return fail(stderr, "serve", bench.OpenError(local, err))
	}
	ms, err := met.serve(stdout, serverSockets(srv)...)
	if err != nil {
		srv.Close()
		return fail(stderr, "serve", err)
	}
	name, suffix := sf.announce()
	if s := bench.ServerSocket(srv); s != nil && s.Shards() > 1 {
		if suffix == "" {
			suffix = fmt.Sprintf(" (%d shards)", s.Shards())
		} else {
			suffix = fmt.Sprintf("%s, %d shards)", strings.TrimSuffix(suffix, ")"), s.Shards())
		}
	}
	out := &lockedWriter{w: stdout}
	fmt.Fprintf(out, "homa: %s server on %v%s\n", name, srv.Addr(), suffix)
	if sf.parent {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		// The goroutine ends when the parent closes the pipe, which it
		// does to stop the server, or with the process.
		in := serveInput
		if in == nil {
			in = bench.ParentInput()
		}
		go bench.AnswerParent(in, out, srv, cancel)
	}
	<-ctx.Done()
	if err := errors.Join(srv.Close(), ms.close()); err != nil {
		return fail(stderr, "serve", err)
	}
	fmt.Fprintf(out, "homa: %s server stopped after %d requests\n", name, srv.Requests())
	return 0
}

// serveInput, if not nil, is what "homa serve --parent" reads its
// parent's queries from, instead of its standard input; tests set it.
var serveInput io.Reader

// lockedWriter serializes the writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serverSockets is the Homa socket of a server, for its metrics (see
// bench.ServerSocket).
func serverSockets(srv bench.Server) []namedSocket {
	if s := bench.ServerSocket(srv); s != nil {
		return []namedSocket{{"server", s}}
	}
	return nil
}
