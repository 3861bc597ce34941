//go:build linux

package faultnet_test

// The two roles of BenchmarkSRPT's child processes.
//
//	srpt-server -homa A:P -tcp A:Q [-link-mbps N] [-cc NAME] [-workers N]
//	  one process, two echo servers: Homa over raw IP on port P (every
//	  request answered with itself) and Go TCP on port Q (4-byte
//	  big-endian length, payload; answered with the same bytes, as
//	  cmd/homa's TCP baseline does). Prints "ready" once both listen;
//	  "report" -> "report {json}"; ends when stdin closes.
//	srpt-client {json srptParams}
//	  runs one experiment (idle probe, background load, measured RPCs),
//	  prints "result {json srptResult}" and ends; it ends early, with no
//	  result, if stdin closes first.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/tools/tcpecho"
	"github.com/homa-go/homa/sock"
)

func init() {
	roles["srpt-server"] = srptServerRole
	roles["srpt-client"] = srptClientRole
}

// srptServerReport is the server's answer to "report".
type srptServerReport struct {
	Homa     sock.Stats
	TCPConns int // connections accepted
}

func srptServerRole(args []string) int {
	fs := flag.NewFlagSet("srpt-server", flag.ContinueOnError)
	homaAddr := fs.String("homa", "", "address and Homa port to serve")
	tcpAddr := fs.String("tcp", "", "address and TCP port to serve")
	linkMbps := fs.Int("link-mbps", 0, "homa.Config.LinkMbps (0: no pacer)")
	workers := fs.Int("workers", 4, "goroutines receiving Homa requests")
	cc := fs.String("cc", "", "TCP congestion control of accepted connections (\"\": the default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	s, err := sock.Open(netip.MustParseAddrPort(*homaAddr), &sock.Config{LinkMbps: *linkMbps})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *tcpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var setup func(*net.TCPConn) error
	if *cc != "" {
		setup = func(c *net.TCPConn) error {
			err := srptSetCC(c, *cc)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			return err
		}
	}
	ts := tcpecho.Serve(ln, setup)
	defer ts.Close()
	for range *workers {
		go srptHomaEcho(s)
	}
	var o out
	o.line("ready")
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		if sc.Text() == "report" {
			o.json("report", srptServerReport{Homa: s.Stats(), TCPConns: int(ts.Accepted())})
		}
	}
	return 0
}

// srptHomaEcho answers every Homa request with itself until the socket
// closes.
func srptHomaEcho(s *sock.Socket) {
	for {
		m, err := s.Recv(context.Background(), sock.Any)
		if err != nil {
			return
		}
		if m.IsRequest() {
			s.Reply(m, m.Data) // fails only if the client gave up
		}
		m.Release()
	}
}

// srptParams is one experiment of the client.
type srptParams struct {
	Mode       string // "homa" or "tcp"
	LinkMbps   int    // homa.Config.LinkMbps of the client socket
	Local      netip.Addr
	HomaServer netip.AddrPort
	TCPServer  netip.AddrPort
	CC         string // TCP congestion control of the client's connections ("": the default)

	Idle       int           // 100-byte RPCs before the load starts
	IdleLimit  time.Duration // bound on them
	Streams    int           // background goroutines
	BgSize     int           // bytes of each background request (and response)
	Warmup     time.Duration // from the start of the load to the first measured RPC
	RPCs       int           // measured RPCs, at least
	MinWindow  time.Duration // the measured phase lasts at least this long
	Size       int           // bytes of each measured request (and response)
	Limit      time.Duration // bound on the measured phase (over RPCs and MinWindow)
	RPCTimeout time.Duration // bound on one measured RPC
	BgTimeout  time.Duration // bound on one background RPC
}

// srptResult is what the client measured. Times are in microseconds.
type srptResult struct {
	CC         string  // TCP congestion control of the short RPCs' connection
	IdleP50    float64 // of the Idle RPCs, before the load
	IdleErrors int
	Measured   int      // measured RPCs that completed
	Errors     int      // measured RPCs that failed
	FirstErrs  []string // the first few
	LimitHit   bool     // the measured phase ended at Limit, short of RPCs
	P50, P99   float64
	P999, Max  float64
	WindowMs   float64 // length of the measured phase
	BgRPCs     int     // background RPCs completed in the measured phase
	BgMBps     float64 // their request bytes per second, one direction
	BgErrors   int
	BgFirstErr string
	BgWarmup   int         // background RPCs completed during the warm-up
	Homa       *sock.Stats `json:",omitempty"` // the client socket's, at the end
}

// srptCaller runs RPCs of one kind: one goroutine at a time per caller.
type srptCaller interface {
	// call sends req and checks that the response echoes it; ctx bounds it.
	call(ctx context.Context, req []byte) error
	close()
}

// srptHomaCaller makes RPCs on a shared Homa socket.
type srptHomaCaller struct {
	s   *sock.Socket
	srv netip.AddrPort
}

func (h srptHomaCaller) call(ctx context.Context, req []byte) error {
	id, err := h.s.Send(h.srv, req, 0)
	if err != nil {
		return err
	}
	m, err := h.s.Recv(ctx, id)
	if err != nil {
		h.s.Abort(id) // nobody waits for it now: it is simply forgotten
		return err
	}
	defer m.Release()
	if m.Err != nil {
		return m.Err
	}
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("response of %d bytes differs from the %d-byte request", len(m.Data), len(req))
	}
	return nil
}

func (srptHomaCaller) close() {}

// srptTCPCaller makes RPCs over its own TCP connection, redialling after
// a failure (which leaves the stream at an unknown place).
type srptTCPCaller struct {
	srv netip.AddrPort
	cc  string
	c   *net.TCPConn
	r   *bufio.Reader
	buf []byte
}

func (t *srptTCPCaller) dial(ctx context.Context) error {
	var d net.Dialer
	if t.cc != "" { // before the SYN, so that all of the connection uses it
		d.Control = func(_, _ string, c syscall.RawConn) error { return srptSetCCRaw(c, t.cc) }
	}
	c, err := d.DialContext(ctx, "tcp", t.srv.String())
	if err != nil {
		return err
	}
	t.c = c.(*net.TCPConn)
	if err := t.c.SetNoDelay(true); err != nil { // Go's default, made explicit
		t.c.Close()
		t.c = nil
		return err
	}
	t.r = tcpecho.NewReader(t.c)
	return nil
}

func (t *srptTCPCaller) call(ctx context.Context, req []byte) error {
	if t.c == nil {
		if err := t.dial(ctx); err != nil {
			return err
		}
	}
	err := t.roundTrip(ctx, req)
	if err != nil {
		t.close()
	}
	return err
}

func (t *srptTCPCaller) roundTrip(ctx context.Context, req []byte) error {
	if d, ok := ctx.Deadline(); ok {
		t.c.SetDeadline(d)
	}
	// A context cancelled before its deadline (the end of the load)
	// ends a blocked read or write too.
	stop := context.AfterFunc(ctx, func() { t.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	t.buf = tcpecho.AppendMessage(t.buf[:0], req)
	if _, err := t.c.Write(t.buf); err != nil {
		return err
	}
	n, err := tcpecho.ReadMessage(t.r, &t.buf)
	if err != nil {
		return err
	}
	if !bytes.Equal(t.buf[tcpecho.Prefix:tcpecho.Prefix+n], req) {
		return fmt.Errorf("response of %d bytes differs from the %d-byte request", n, len(req))
	}
	return nil
}

func (t *srptTCPCaller) close() {
	if t.c != nil {
		t.c.Close()
		t.c = nil
	}
}

func srptClientRole(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "srpt-client: want one argument, the JSON parameters")
		return 2
	}
	var p srptParams
	if err := json.Unmarshal([]byte(args[0]), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // stdin closing means: stop now
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	var (
		s         *sock.Socket
		newCaller func() srptCaller
	)
	switch p.Mode {
	case "homa":
		var err error
		s, err = sock.Open(netip.AddrPortFrom(p.Local, 0), &sock.Config{LinkMbps: p.LinkMbps})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
		newCaller = func() srptCaller { return srptHomaCaller{s: s, srv: p.HomaServer} }
	case "tcp":
		// A connection for the short RPCs and one per background
		// stream, as a Go service would have.
		newCaller = func() srptCaller { return &srptTCPCaller{srv: p.TCPServer, cc: p.CC} }
	default:
		fmt.Fprintf(os.Stderr, "srpt-client: unknown mode %q\n", p.Mode)
		return 2
	}
	res := srptRun(ctx, p, newCaller)
	if ctx.Err() != nil {
		return 1 // stopped by the parent
	}
	if s != nil {
		st := s.Stats()
		res.Homa = &st
	}
	var o out
	o.json("result", res)
	return 0
}

// srptRun runs the experiment: the idle probe, then the background load
// and, once it has warmed up, the measured RPCs one after another.
func srptRun(ctx context.Context, p srptParams, newCaller func() srptCaller) srptResult {
	var res srptResult
	small := newCaller()
	defer small.close()
	req := make([]byte, p.Size)
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}

	// Idle: the floor of this stack through the same path.
	var idle []time.Duration
	idleEnd := time.Now().Add(p.IdleLimit)
	for range p.Idle {
		if ctx.Err() != nil {
			return res
		}
		if time.Now().After(idleEnd) {
			break
		}
		fill(req)
		rpcCtx, rpcCancel := context.WithTimeout(ctx, p.RPCTimeout)
		start := time.Now()
		err := small.call(rpcCtx, req)
		took := time.Since(start)
		rpcCancel()
		if err != nil {
			res.IdleErrors++
			continue
		}
		idle = append(idle, took)
	}
	if len(idle) > 0 {
		res.IdleP50 = srptPercentiles(idle)[0]
	}
	if t, ok := small.(*srptTCPCaller); ok && t.c != nil {
		res.CC, _ = srptGetCC(t.c)
	}

	// The background load: Streams goroutines, each with 1 MB RPCs back
	// to back, recording when each completes.
	bgCtx, bgCancel := context.WithCancel(ctx)
	var (
		bgMu   sync.Mutex
		bgDone []time.Time
		bgWG   sync.WaitGroup
	)
	for i := range p.Streams {
		c := newCaller()
		breq := make([]byte, p.BgSize)
		r := rand.New(rand.NewPCG(uint64(i)+10, 3))
		for j := range breq {
			breq[j] = byte(r.Uint32())
		}
		bgWG.Go(func() {
			defer c.close()
			for bgCtx.Err() == nil {
				rpcCtx, rpcCancel := context.WithTimeout(bgCtx, p.BgTimeout)
				err := c.call(rpcCtx, breq)
				rpcCancel()
				now := time.Now()
				bgMu.Lock()
				switch {
				case err == nil:
					bgDone = append(bgDone, now)
				case bgCtx.Err() == nil:
					res.BgErrors++
					if res.BgFirstErr == "" {
						res.BgFirstErr = err.Error()
					}
				}
				bgMu.Unlock()
				if err != nil && bgCtx.Err() == nil {
					// Do not spin on a persistent failure.
					select {
					case <-time.After(10 * time.Millisecond):
					case <-bgCtx.Done():
					}
				}
			}
		})
	}
	stopBg := func() {
		bgCancel()
		bgWG.Wait()
	}
	select {
	case <-time.After(p.Warmup):
	case <-ctx.Done():
		stopBg()
		return res
	}

	// The measured RPCs: at least RPCs of them, and for at least
	// MinWindow so that the background's goodput is measured over many
	// of its messages.
	var lat []time.Duration
	start := time.Now()
	limit := start.Add(p.Limit)
	for n := 0; n < p.RPCs || time.Since(start) < p.MinWindow; n++ {
		if ctx.Err() != nil {
			break
		}
		if time.Now().After(limit) {
			res.LimitHit = true
			break
		}
		fill(req)
		rpcCtx, rpcCancel := context.WithTimeout(ctx, p.RPCTimeout)
		t0 := time.Now()
		err := small.call(rpcCtx, req)
		took := time.Since(t0)
		rpcCancel()
		if err != nil {
			if ctx.Err() == nil {
				res.Errors++
				if len(res.FirstErrs) < 5 {
					res.FirstErrs = append(res.FirstErrs, fmt.Sprintf("RPC %d after %v: %v", len(lat)+res.Errors, took.Round(time.Microsecond), err))
				}
			}
			continue
		}
		lat = append(lat, took)
	}
	end := time.Now()
	stopBg()

	res.Measured = len(lat)
	res.WindowMs = float64(end.Sub(start)) / float64(time.Millisecond)
	if len(lat) > 0 {
		q := srptPercentiles(lat, 0.5, 0.99, 0.999, 1)
		res.P50, res.P99, res.P999, res.Max = q[0], q[1], q[2], q[3]
	}
	// Goodput: the completions inside the measured phase, counted from
	// the first to the last of them, so that the granularity of 1 MB
	// messages does not bias the rate.
	var in []time.Time
	for _, t := range bgDone {
		switch {
		case t.Before(start):
			res.BgWarmup++
		case !t.After(end):
			in = append(in, t)
		}
	}
	res.BgRPCs = len(in)
	if len(in) >= 2 {
		slices.SortFunc(in, time.Time.Compare)
		span := in[len(in)-1].Sub(in[0]).Seconds()
		res.BgMBps = float64((len(in)-1)*p.BgSize) / span / 1e6
	}
	return res
}

// srptPercentiles returns the given quantiles of d (0.5 if none are
// given) in microseconds, by nearest rank. It sorts d.
func srptPercentiles(d []time.Duration, qs ...float64) []float64 {
	if len(qs) == 0 {
		qs = []float64{0.5}
	}
	slices.Sort(d)
	out := make([]float64, len(qs))
	for i, q := range qs {
		k := int(q*float64(len(d))+0.999999) - 1
		out[i] = float64(d[min(max(k, 0), len(d)-1)]) / float64(time.Microsecond)
	}
	return out
}

// srptSetCC sets the congestion control of a TCP connection (root may
// pick any the kernel has; others only those in
// net.ipv4.tcp_allowed_congestion_control).
func srptSetCC(c *net.TCPConn, cc string) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return srptSetCCRaw(rc, cc)
}

func srptSetCCRaw(rc syscall.RawConn, cc string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("TCP_CONGESTION %s: %w", cc, serr)
	}
	return nil
}

// srptGetCC returns the congestion control of a TCP connection.
func srptGetCC(c *net.TCPConn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var (
		cc   string
		gerr error
	)
	if err := rc.Control(func(fd uintptr) {
		cc, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(cc, "\x00"), gerr
}
