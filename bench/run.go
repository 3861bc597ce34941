package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// Random streams of one seed: each phase and each throughput lane draws
// its sizes from its own, so every protocol sees the same sizes.
const (
	streamWarmup    = 1
	streamCalibrate = 2
	streamLatency   = 3
	streamArrivals  = 4
	streamLanes     = 1000 // + lane number
)

// spotCheck is how many leading bytes of each reply throughput and
// workload modes compare with the request, besides its length (latency
// mode compares every byte).
const spotCheck = 64

// rig is what one protocol's run uses: its server (in a child process,
// in this one, or none against a remote target) and its clients.
type rig struct {
	srv     Server
	child   *childServer   // srv, when it runs in a child process
	addr    netip.AddrPort // the server's, wherever it is; zero for a loopback-only protocol
	clients []client
}

// openRig starts the server and dials the clients of p.
func openRig(ctx context.Context, p Protocol, cfg *Config, stderr io.Writer) (*rig, error) {
	if p.LoopbackOnly() {
		open := p.loopback
		if cfg.Mode == Throughput {
			open = func(ctx context.Context, host netip.Addr) (client, error) { return p.rate(ctx, host, cfg.Clients) }
		}
		c, err := open(ctx, cfg.Host)
		if err != nil {
			return nil, err
		}
		return &rig{clients: []client{c}}, nil
	}
	r := &rig{}
	addr := cfg.TargetAddr
	switch {
	case cfg.Target != "":
	case cfg.InProcess:
		srv, err := p.serve(ctx, netip.AddrPortFrom(cfg.Host, 0), ServerOptions{ReplySize: cfg.ReplySize, Engine: cfg.Engine})
		if err != nil {
			return nil, err
		}
		r.srv, addr = srv, srv.Addr()
	default:
		child, err := startChild(ctx, p, cfg)
		if err != nil {
			return nil, err
		}
		r.srv, r.child, addr = child, child, child.Addr()
		if cfg.Verbose {
			fmt.Fprintf(stderr, "homa bench: %s server: process %d on %v\n", p.name, child.pid, addr)
		}
	}
	r.addr = addr
	shared := &clientShared{}
	for i := range cfg.Clients {
		c, err := p.dial(ctx, addr, clientOptions{conns: cfg.Conns, Engine: cfg.Engine, index: i,
			outstanding: cfg.Outstanding, shared: shared})
		if err != nil {
			return nil, errors.Join(RemoteError(addr, err), r.Close())
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

// serverStats is what the server's Homa socket counted, wherever it
// runs (nil when it has none, or runs elsewhere).
func (r *rig) serverStats() (*SocketStats, error) {
	if r.child != nil {
		return r.child.stats()
	}
	if r.srv != nil {
		return serverStats(ServerSocket(r.srv)), nil
	}
	return nil, nil
}

// close closes the clients, then the server.
func (r *rig) Close() error {
	var err error
	for _, c := range r.clients {
		err = errors.Join(err, c.Close())
	}
	if r.srv != nil {
		err = errors.Join(err, r.srv.Close())
	}
	return err
}

// runner measures one protocol.
type runner struct {
	cfg     *Config
	p       Protocol
	clients []client
	pattern []byte // every request is a prefix of it
	prog    *progress
	// serverCPU, if not nil, is the CPU time the server's process has
	// used so far, when that is not this process.
	serverCPU func() (time.Duration, error)
}

// sample draws a request size from rng; a size beyond what a clipping
// protocol carries is cut to its limit.
func (r *runner) sample(rng *rand.Rand) int {
	size := r.cfg.Dist.Sample(rng)
	if r.p.clip && size > r.p.maxSize {
		size = r.p.maxSize
	}
	return size
}

// cpu is the user and system CPU time used so far by this process and,
// when the server runs in a process of its own, by the server's.
func (r *runner) cpu() (time.Duration, error) {
	t := cpuTime()
	if r.serverCPU != nil {
		s, err := r.serverCPU()
		if err != nil {
			return 0, err
		}
		t += s
	}
	return t, nil
}

// begin starts a measured phase, once its setup is done: it collects
// the setup's garbage (a request buffer of up to 1 MB, the samples'
// slice) first, so that a collection the bench's own allocations would
// set off does not run in the phase, and returns the CPU time used so
// far (see cpu). Without it, a collection's mark phase ran for 5.5-6.5
// ms among a 1 MB run's first RPCs (GODEBUG=gctrace=1), its worker on a
// CPU that the spinning receivers of two processes already keep busy on
// a two-CPU machine.
func (r *runner) begin() (time.Duration, error) {
	runtime.GC()
	return r.cpu()
}

// cpuSince sets m's CPU time: what has been used since cpu0.
func (r *runner) cpuSince(m *measured, cpu0 time.Duration) error {
	t, err := r.cpu()
	if err != nil {
		return err
	}
	m.cpu = t - cpu0
	return nil
}

// measured is the outcome of one phase.
type measured struct {
	samples []workload.Sample
	bytes   int64         // request payload of the completed RPCs
	failed  int           // RPCs that ended in an error
	dropped int           // arrivals not sent: too many RPCs in flight
	elapsed time.Duration // the phase's length; one RPC at a time, the time spent in calls
	cpu     time.Duration // user+system time of the process
}

func (m *measured) add(size int, rtt time.Duration) {
	m.samples = append(m.samples, workload.Sample{Size: size, RTT: rtt})
	m.bytes += int64(size)
}

// merge adds o's RPCs to m.
func (m *measured) merge(o *measured) {
	m.samples = append(m.samples, o.samples...)
	m.bytes += o.bytes
	m.failed += o.failed
	m.dropped += o.dropped
}

// benchProtocol runs every phase of one protocol: warmup, calibration,
// and the measurement of the mode.
func benchProtocol(ctx context.Context, p Protocol, cfg *Config, stderr io.Writer) (Result, error) {
	run, err := runProtocol(ctx, p, cfg, stderr)
	if err != nil {
		return Result{}, err
	}
	return run.result(p, cfg)
}

// A protoRun is one run of a protocol, before its row is made: what its
// measured phase saw, the unloaded RPCs of its calibration, and, with
// Config.Stats, what its sockets counted over the run (statsRPCs: the
// RPCs the run made, warmup and calibration included).
type protoRun struct {
	m              measured
	calib          []workload.Sample
	server         string
	client, served *SocketStats
	statsRPCs      int
}

// runProtocol runs one protocol's server and clients through warmup,
// calibration and the measured phase.
func runProtocol(ctx context.Context, p Protocol, cfg *Config, stderr io.Writer) (run protoRun, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout+cfg.Duration)
	defer cancel()
	rg, err := openRig(ctx, p, cfg, stderr)
	if err != nil {
		return run, err
	}
	defer func() { err = errors.Join(err, rg.Close()) }()
	r := &runner{cfg: cfg, p: p, clients: rg.clients, pattern: makePattern(cfg.Dist.Max())}
	if rg.child != nil {
		r.serverCPU = rg.child.cpu
	}
	if cfg.Progress {
		r.prog = &progress{w: stderr, every: cfg.Every, name: p.name}
	}
	defer watchStuck(ctx, stderr, p.name, rg.clients)()
	if _, err := r.serial(ctx, "warmup", streamWarmup, cfg.Warmup); err != nil {
		return run, err
	}
	run.statsRPCs = cfg.Warmup
	if cfg.Mode != Latency && cfg.Calibrate > 0 {
		calib, err := r.serial(ctx, "calibration", streamCalibrate, cfg.Calibrate)
		if err != nil {
			return run, err
		}
		run.calib = calib.samples
		run.statsRPCs += cfg.Calibrate
	}
	if run.m, err = r.measure(ctx); err != nil {
		return run, err
	}
	run.statsRPCs += len(run.m.samples) + run.m.failed
	if rg.addr.IsValid() {
		run.server = rg.addr.String()
	}
	if cfg.Stats {
		run.client = clientStats(rg.clients)
		if run.served, err = rg.serverStats(); err != nil {
			return run, err
		}
	}
	return run, nil
}

// join adds the run o, another round of the same protocol, to run.
func (run *protoRun) join(o protoRun) {
	run.m.merge(&o.m)
	run.m.elapsed += o.m.elapsed
	run.m.cpu += o.m.cpu
	run.calib = append(run.calib, o.calib...)
	run.client = run.client.join(o.client)
	run.served = run.served.join(o.served)
	run.statsRPCs += o.statsRPCs
}

// result writes the run's samples (Config.Samples) and makes its row.
func (run *protoRun) result(p Protocol, cfg *Config) (Result, error) {
	var base *workload.Baseline
	if run.calib != nil {
		if err := writeSamples(cfg.samplesPath(p, ".calib"), run.calib); err != nil {
			return Result{}, err
		}
		base = workload.NewBaseline(run.calib)
	}
	if cfg.Mode == Latency {
		base = workload.NewBaseline(run.m.samples) // unloaded by definition
	}
	if err := writeSamples(cfg.samplesPath(p, ""), run.m.samples); err != nil {
		return Result{}, err
	}
	res := summarize(p, cfg, run.m, base)
	res.Server = run.server
	if cfg.Stats {
		res.ClientStats, res.ServerStats, res.StatsRPCs = run.client, run.served, run.statsRPCs
	}
	return res, nil
}

// measure runs the measured phase of the mode.
func (r *runner) measure(ctx context.Context) (measured, error) {
	switch r.cfg.Mode {
	case Throughput:
		return r.throughput(ctx)
	case Workload:
		if r.cfg.Duration == 0 {
			return measured{}, nil
		}
		return r.openLoop(ctx)
	}
	return r.serial(ctx, "latency", streamLatency, r.cfg.Count)
}

// makePattern makes the bytes requests are cut from.
func makePattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// serial makes n RPCs one at a time, sizes drawn from stream, each
// request stamped with its number and each reply checked byte for byte.
// The first failure ends the phase.
func (r *runner) serial(ctx context.Context, phase string, stream uint64, n int) (measured, error) {
	if n == 0 {
		return measured{}, nil
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, stream))
	c := r.clients[0]
	var l lane
	defer l.release()
	req := make([]byte, len(r.pattern))
	copy(req, r.pattern)
	m := measured{samples: make([]workload.Sample, 0, n)}
	stop := r.prog.phase(phase, nil)
	defer stop()
	cpu0, err := r.begin()
	if err != nil {
		return m, fmt.Errorf("%s: %w", phase, err)
	}
	// The rate is over the time spent in calls: checking the reply
	// (tens of microseconds for 1 MB) is the client's work, not the
	// protocol's.
	var inCalls time.Duration
	for i := range n {
		size := r.sample(rng)
		// A number in front makes a stale or misrouted reply fail the
		// comparison.
		var seq [8]byte
		binary.LittleEndian.PutUint64(seq[:], uint64(i))
		copy(req[:size], seq[:])
		t0 := time.Now()
		resp, err := c.call(ctx, &l, req[:size])
		rtt := time.Since(t0)
		if err == nil {
			err = checkReply(req[:size], resp, r.cfg.ReplySize, len(req))
		}
		if err != nil {
			return m, phaseError(ctx, phase, err, i, n)
		}
		m.add(size, rtt)
		inCalls += rtt
		r.prog.add()
	}
	m.elapsed = inCalls
	if err := r.cpuSince(&m, cpu0); err != nil {
		return m, fmt.Errorf("%s: %w", phase, err)
	}
	return m, nil
}

// throughput keeps cfg.Outstanding RPCs in flight on every client, each
// lane starting its next RPC when the last completes, until cfg.Count
// have started or cfg.Duration has passed.
func (r *runner) throughput(ctx context.Context) (measured, error) {
	cfg := r.cfg
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var remaining atomic.Int64
	remaining.Store(int64(cfg.Count))
	lanes := make([]measured, len(r.clients)*cfg.Outstanding)
	stop := r.prog.phase("throughput", nil)
	cpu0, err := r.begin()
	if err != nil {
		stop()
		return measured{}, fmt.Errorf("throughput: %w", err)
	}
	start := time.Now()
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	if async, ok := asyncClients(r.clients, false); ok {
		r.throughputAsync(ctx, cancel, async, &remaining, deadline, lanes)
	} else {
		var wg sync.WaitGroup
		for i := range lanes {
			c := r.clients[i%len(r.clients)]
			wg.Go(func() {
				r.lane(ctx, cancel, c, uint64(i), &remaining, deadline, &lanes[i])
			})
		}
		wg.Wait()
	}
	stop()
	var m measured
	for i := range lanes {
		m.merge(&lanes[i])
	}
	m.elapsed = time.Since(start)
	if err := r.cpuSince(&m, cpu0); err != nil {
		return m, fmt.Errorf("throughput: %w", err)
	}
	if err := context.Cause(ctx); err != nil {
		return m, phaseError(ctx, "throughput", err, len(m.samples), cfg.Count)
	}
	return m, nil
}

// lane is one closed loop of the throughput mode. A wrong reply cancels
// the whole phase; other failures are counted.
func (r *runner) lane(ctx context.Context, cancel context.CancelCauseFunc, c client, id uint64,
	remaining *atomic.Int64, deadline time.Time, m *measured) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, streamLanes+id))
	var l lane
	defer l.release()
	for remaining.Add(-1) >= 0 && ctx.Err() == nil {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return
		}
		size := r.sample(rng)
		req := r.pattern[:size]
		t0 := time.Now()
		resp, err := c.call(ctx, &l, req)
		rtt := time.Since(t0)
		if err != nil {
			if ctx.Err() == nil {
				m.failed++
			}
			continue
		}
		if err := checkReply(req, resp, r.cfg.ReplySize, spotCheck); err != nil {
			cancel(err)
			return
		}
		m.add(size, rtt)
		r.prog.add()
	}
}

// openLoop sends RPCs at the times of a Poisson process whose rate puts
// cfg.LoadMbps of request payload on the wire, for cfg.Duration,
// whatever the replies do: each RPC runs in its own goroutine, spread
// over the clients in turn (asyncClients: from each client's event
// loop). An arrival that finds cfg.MaxOutstanding RPCs in flight is
// dropped and counted.
func (r *runner) openLoop(ctx context.Context) (measured, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu       sync.Mutex // guards m
		m        measured
		last     time.Time // the latest completion
		inFlight atomic.Int64
		dropped  atomic.Int64
	)
	stop := r.prog.phase("workload", func() string {
		return fmt.Sprintf(", %d in flight, %d dropped", inFlight.Load(), dropped.Load())
	})
	cpu0, err := r.begin()
	if err != nil {
		stop()
		return m, fmt.Errorf("workload: %w", err)
	}
	start := time.Now()
	if async, ok := asyncClients(r.clients, true); ok {
		last = r.openLoopAsync(ctx, cancel, async, start, &inFlight, &dropped, &m, &mu)
	} else {
		last = r.arrive(ctx, cancel, start, &inFlight, &dropped, &m, &mu)
	}
	stop()
	m.dropped = int(dropped.Load())
	m.elapsed = time.Since(start)
	if err := r.cpuSince(&m, cpu0); err != nil {
		return m, fmt.Errorf("workload: %w", err)
	}
	if !last.IsZero() {
		m.elapsed = last.Sub(start)
	}
	if err := context.Cause(ctx); err != nil {
		return m, phaseError(ctx, "workload", err, len(m.samples), -1)
	}
	return m, nil
}

// arrive makes the arrivals of openLoop, each RPC in a goroutine of its
// own, waits for them, and returns the time of the last completion.
func (r *runner) arrive(ctx context.Context, cancel context.CancelCauseFunc, start time.Time,
	inFlight, dropped *atomic.Int64, m *measured, mu *sync.Mutex) time.Time {
	cfg := r.cfg
	rate := workload.RatePerSecond(cfg.Dist, cfg.LoadMbps)
	rng := rand.New(rand.NewPCG(cfg.Seed, streamArrivals))
	var (
		wg    sync.WaitGroup
		last  time.Time // guarded by mu
		lanes = sync.Pool{New: func() any { return new(lane) }}
	)
	end := start.Add(cfg.Duration)
	timer := time.NewTimer(0)
	<-timer.C
	next := start
	for i := 0; ; i++ {
		next = next.Add(workload.NextGap(rng, rate))
		if !next.Before(end) || !waitUntil(ctx, timer, next) {
			break
		}
		size := r.sample(rng)
		if inFlight.Load() >= int64(cfg.MaxOutstanding) {
			dropped.Add(1)
			continue
		}
		inFlight.Add(1)
		c := r.clients[i%len(r.clients)]
		wg.Go(func() {
			defer inFlight.Add(-1)
			l := lanes.Get().(*lane)
			req := r.pattern[:size]
			t0 := time.Now()
			resp, err := c.call(ctx, l, req)
			done := time.Now()
			if err == nil {
				if err = checkReply(req, resp, cfg.ReplySize, spotCheck); err != nil {
					cancel(err)
				}
			}
			l.release()
			lanes.Put(l)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				m.failed++
				return
			}
			m.add(size, done.Sub(t0))
			if done.After(last) {
				last = done
			}
			r.prog.add()
		})
	}
	wg.Wait()
	return last
}

// waitUntil waits for t on timer; false if ctx ends first.
func waitUntil(ctx context.Context, timer *time.Timer, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer.Reset(d)
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		timer.Stop()
		return false
	}
}

// checkReply checks a reply to req from a server whose replies are
// replySize bytes (0: echoes): its length, its first compare bytes
// against the request, and, if it compares them all, the zero padding.
// The comparisons run at memory speed (bytes.Equal, bytes.Count): a
// client that compared a 1 MB reply byte by byte spent a round trip's
// time on it, during which a server waiting for its next request spun.
func checkReply(req, resp []byte, replySize, compare int) error {
	want := len(req)
	if replySize > 0 {
		want = replySize
	}
	if len(resp) != want {
		return fmt.Errorf("%w: a %d-byte request got %d bytes back, want %d (--reply-size must be the server's: homa serve --reply-size N replies N bytes)",
			errMismatch, len(req), len(resp), want)
	}
	echoed := min(len(req), want)
	n := min(echoed, compare)
	if !bytes.Equal(resp[:n], req[:n]) {
		i := 0
		for resp[i] == req[i] {
			i++
		}
		return fmt.Errorf("%w: a %d-byte request got a reply differing at byte %d", errMismatch, len(req), i)
	}
	if pad := resp[echoed:want]; compare >= want && bytes.Count(pad, zero) != len(pad) {
		i := bytes.IndexFunc(pad, func(r rune) bool { return r != 0 })
		return fmt.Errorf("%w: byte %d of the padding is not zero", errMismatch, echoed+i)
	}
	return nil
}

// zero is the padding byte of replies longer than their requests.
var zero = []byte{0}

// phaseError explains why a phase stopped after done of total RPCs
// (total -1: open-ended): the context's end, or err.
func phaseError(ctx context.Context, phase string, err error, done, total int) error {
	of := fmt.Sprintf("%d", done)
	if total >= 0 {
		of = fmt.Sprintf("%d of %d", done, total)
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(err, errMismatch) || ctx.Err() == nil:
		return fmt.Errorf("%s: %w", phase, err)
	case errors.Is(cause, errMismatch):
		return fmt.Errorf("%s: %w", phase, cause)
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("%s: timed out with %s RPCs done", phase, of)
	}
	return fmt.Errorf("%s: interrupted with %s RPCs done", phase, of)
}

// samplesPath is the samples file of p (suffix ".calib" for the
// calibration's): cfg.Samples itself when one protocol runs, else with
// the protocol's name before the extension. "" means none.
func (c *Config) samplesPath(p Protocol, suffix string) string {
	if c.Samples == "" {
		return ""
	}
	path := c.Samples
	if len(c.Protocols) > 1 {
		ext := filepath.Ext(path)
		path = strings.TrimSuffix(path, ext) + "-" + p.name + ext
	}
	return path + suffix
}

// writeSamples writes s to the file path, if path is not "".
func writeSamples(path string, s []workload.Sample) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = workload.WriteSamples(f, s)
	return errors.Join(err, f.Close())
}
