package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/internal/tools/workload"
	"github.com/homa-go/homa/sock"
)

// Defaults of the flags whose default depends on the mode.
const (
	defaultClients        = 4
	defaultOutstanding    = 32
	defaultMaxOutstanding = 2000
	defaultCalibrate      = 1000
	defaultConns          = 64
	defaultBuckets        = 10
	defaultDuration       = 5 * time.Second
)

const benchSynopsis = "[--mode latency|throughput|workload] [--proto LIST] [--target HOST:PORT | --in-process | --split-cpus]\n" +
	"       [--size N | --workload w1..w5] [--count N] [--warmup N] [--clients M] [--outstanding N]\n" +
	"       [--load-mbps X] [--duration D] [--max-outstanding N] [--calibrate N] [--samples FILE] [--seed S]\n" +
	"       [--reply-size N] [--conns N] [--link-mbps M] [--unsched-bytes N] [--poll D] [--peer-timeout D] [--buckets N] [--addr-family 4|6] [--timeout D]\n" +
	"       [--rounds N] [--json] [--progress] [--plot FILE.svg|FILE.png]"

// defaultTargetProto is the protocol of a --target without --proto:
// what homa serve serves without --proto.
const defaultTargetProto = "homa"

// benchFlags are the flags of bench as given.
type benchFlags struct {
	load                                 loadFlags
	mode, proto, vs, target, dist        string
	samples, plot, benchfmt              string
	family, clients, outstanding, maxOut int
	calibrate, replySize, conns, buckets int
	rounds                               int
	loadMbps                             float64
	duration, progressEvery              time.Duration
	seed                                 uint64
	asJSON, progress, inProcess, stats   bool
	splitCPUs                            bool
	engine                               engineFlags
	set                                  map[string]bool // flags on the command line
}

func (f *benchFlags) register(fs *flag.FlagSet) {
	f.load.register(fs, 10000, bench.MaxSize())
	fs.StringVar(&f.mode, "mode", bench.Latency, "`mode`: latency (one RPC at a time), throughput (clients x outstanding, closed loop), workload (open-loop Poisson arrivals)")
	fs.StringVar(&f.proto, "proto", "", "comma-separated `protocols` to run: "+bench.ProtocolNames(all)+
		"; \"layers\" is "+bench.ProtocolSet("layers")+" (default: the transports the mode supports, the RPC layers left out)")
	fs.StringVar(&f.vs, "vs", "", "comma-separated `baselines` to run after homa and homa-udp (the older form of --proto)")
	hide(fs, "vs")
	fs.StringVar(&f.target, "target", "", "`HOST:PORT` of a remote server (homa serve --proto P); no server in this process; one --proto, by default "+defaultTargetProto)
	fs.BoolVar(&f.inProcess, "in-process", false, "run each server in this process (default: in a child process, homa serve, so that client and server are two processes)")
	fs.BoolVar(&f.splitCPUs, "split-cpus", false, "give the clients (this process) the first half of the CPUs and each server child the second half, with GOMAXPROCS to match, as two hosts would have them; protocols that run both ends in this process (udp, floor) run on the clients' half (Linux)")
	fs.StringVar(&f.dist, "workload", "", "draw request sizes from `W`: w1..w5 (instead of --size)")
	fs.IntVar(&f.clients, "clients", 0, "`M` clients: Homa sockets, TCP connection pools or gRPC connections (default 4 in throughput mode, else 1)")
	fs.IntVar(&f.outstanding, "outstanding", 0, "RPCs in flight per client in throughput mode (default 32)")
	fs.Float64Var(&f.loadMbps, "load-mbps", 0, "workload mode: offered load of `X` Mbit/s of request payload")
	fs.DurationVar(&f.duration, "duration", 0, "workload mode: length of the loaded phase (default 5s; 0 skips it); throughput mode: stop after this long (default: at --count)")
	fs.IntVar(&f.maxOut, "max-outstanding", defaultMaxOutstanding, "workload mode: arrivals beyond this many RPCs in flight are dropped and counted")
	fs.IntVar(&f.calibrate, "calibrate", defaultCalibrate, "unloaded RPCs, one at a time, whose RTTs slowdowns are relative to (throughput and workload modes; 0 skips)")
	fs.IntVar(&f.rounds, "rounds", 1, "split the measured phase (--count, or --duration in workload mode) into `N` rounds and run the protocols in turn round by round, so that a machine whose load drifts weighs on each alike; prints each round's rate and its ratio to TCP's")
	fs.StringVar(&f.samples, "samples", "", "write every measured RPC's size,rtt_ns to `FILE`, and the calibration's to FILE.calib")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the request sizes and arrival times")
	fs.IntVar(&f.replySize, "reply-size", 0, "replies are `N` bytes (the first N of the request, zero-padded); 0 echoes; must match a remote server's")
	fs.IntVar(&f.conns, "conns", defaultConns, "tcp: connections in each client's pool")
	f.engine.register(fs)
	fs.IntVar(&f.buckets, "buckets", 0, "message-size buckets of the slowdown table (default 10 with --workload, else 1)")
	fs.IntVar(&f.family, "addr-family", 4, "IP version of the loopback address: 4 or 6")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&f.progress, "progress", false, "print progress to stderr even with --json, and the process id of each server")
	fs.BoolVar(&f.stats, "stats", false, "report what each Homa protocol's client sockets and its server's counted over the run: packets by type, RESENDs, retransmissions, drops, the receive path's parks, steals, hand-offs, timer wake-ups and timers set")
	fs.DurationVar(&f.progressEvery, "progress-interval", time.Second, "time between progress lines")
	fs.StringVar(&f.benchfmt, "benchfmt", "", "append the rows to `FILE` in the Go benchmark format, for benchstat: alternate two builds' runs into two files, then benchstat old new")
	fs.StringVar(&f.plot, "plot", "", "draw into `FILE` (.svg or .png): in latency mode the RTT distribution (CDF) per protocol, otherwise slowdown against message size")
}

// all keeps every protocol.
func all(bench.Protocol) bool { return true }

// remote keeps the protocols with a server of their own, for serve and
// --target.
func remote(p bench.Protocol) bool { return !p.LoopbackOnly() }

// check validates the flags and builds the run's configuration.
func (f *benchFlags) check(fs *flag.FlagSet) (*bench.Config, error) {
	f.set = make(map[string]bool)
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.load.check(); err != nil {
		return nil, err
	}
	if f.rounds < 1 {
		return nil, fmt.Errorf("--rounds %d: must be at least 1", f.rounds)
	}
	c := &bench.Config{Mode: f.mode, Count: f.load.count, Warmup: f.load.warmup, Timeout: f.load.timeout, Rounds: f.rounds,
		Target: f.target, InProcess: f.inProcess, SplitCPUs: f.splitCPUs, Samples: f.samples, Seed: f.seed, ReplySize: f.replySize, Conns: f.conns, Engine: f.engine.config(),
		MaxOutstanding: f.maxOut, Calibrate: f.calibrate, LoadMbps: f.loadMbps, Executable: serverExecutable, ChildStarted: childStarted}
	for _, step := range []func(*bench.Config) error{f.checkMode, f.checkSizes, f.checkProtocols, f.checkLimits, f.checkOutput} {
		if err := step(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkMode sets what depends on the mode: clients, outstanding RPCs,
// duration, warmup.
func (f *benchFlags) checkMode(c *bench.Config) error {
	switch {
	case f.set["clients"] && f.clients < 1:
		return fmt.Errorf("--clients %d: must be at least 1", f.clients)
	case f.set["outstanding"] && f.outstanding < 1:
		return fmt.Errorf("--outstanding %d: must be at least 1", f.outstanding)
	case f.duration < 0:
		return fmt.Errorf("--duration %v: must not be negative", f.duration)
	}
	c.Clients, c.Outstanding = 1, 1
	switch f.mode {
	case bench.Latency:
		if f.set["clients"] && f.clients != 1 || f.set["outstanding"] && f.outstanding != 1 {
			return errors.New("latency mode has one client with one RPC at a time; use --mode throughput")
		}
		if f.set["load-mbps"] || f.set["duration"] || f.set["max-outstanding"] {
			return errors.New("--load-mbps, --duration and --max-outstanding need --mode workload (or throughput for --duration)")
		}
		if f.set["calibrate"] {
			return errors.New("--calibrate is for throughput and workload modes (a latency run is its own unloaded baseline)")
		}
	case bench.Throughput:
		c.Clients = f.pick("clients", f.clients, defaultClients)
		c.Outstanding = f.pick("outstanding", f.outstanding, defaultOutstanding)
		c.Duration = f.duration
		if f.set["load-mbps"] || f.set["max-outstanding"] {
			return errors.New("--load-mbps and --max-outstanding need --mode workload")
		}
	case bench.Workload:
		c.Clients = f.pick("clients", f.clients, 1)
		c.Duration = defaultDuration
		if f.set["duration"] {
			c.Duration = f.duration
		}
		if f.set["outstanding"] {
			return errors.New("--outstanding is for --mode throughput; workload mode bounds RPCs in flight with --max-outstanding")
		}
		if c.Duration > 0 && !(f.loadMbps > 0) {
			return fmt.Errorf("--load-mbps %v: workload mode needs a positive load", f.loadMbps)
		}
		if !f.set["warmup"] {
			c.Warmup = 0 // the calibration warms up; a remote server sees only the phases asked for
		}
	default:
		return fmt.Errorf("--mode %q: must be latency, throughput or workload", f.mode)
	}
	return nil
}

// pick is the value v of the flag name if it was given, else def.
func (f *benchFlags) pick(name string, v, def int) int {
	if f.set[name] {
		return v
	}
	return def
}

// checkSizes sets the request size distribution and the buckets.
func (f *benchFlags) checkSizes(c *bench.Config) error {
	if f.dist != "" {
		if f.set["size"] {
			return errors.New("--size and --workload are exclusive")
		}
		d, err := workload.Named(f.dist)
		if err != nil {
			return fmt.Errorf("--workload %q: %w", f.dist, err)
		}
		c.Dist, c.Buckets = d, defaultBuckets
	} else {
		c.Dist, c.Size, c.Buckets = workload.FixedLarge(f.load.size), f.load.size, 1
	}
	if f.set["buckets"] {
		if f.buckets < 1 {
			return fmt.Errorf("--buckets %d: must be at least 1", f.buckets)
		}
		c.Buckets = f.buckets
	}
	return nil
}

// checkProtocols picks the protocols and the addresses.
func (f *benchFlags) checkProtocols(c *bench.Config) error {
	if f.proto != "" && f.vs != "" {
		return errors.New("--proto and --vs are exclusive")
	}
	var err error
	switch {
	case f.proto != "":
		c.Protocols, err = bench.ParseProtocols("--proto", f.proto)
	case f.vs != "":
		c.Protocols, err = bench.ParseProtocols("--vs", "homa,homa-udp,"+f.vs)
	case f.target != "":
		// What homa serve serves by default.
		c.Protocols, err = bench.ParseProtocols("--proto", defaultTargetProto)
	default:
		c.Protocols = bench.DefaultProtocols(c.Mode)
	}
	if err != nil {
		return err
	}
	for _, p := range c.Protocols {
		if !p.MeasuredIn(c.Mode) {
			return fmt.Errorf("%s is not measured in %s mode (which takes %s)", p.Name(), c.Mode,
				bench.ProtocolNames(func(p bench.Protocol) bool { return p.MeasuredIn(c.Mode) }))
		}
	}
	if f.splitCPUs && (f.inProcess || f.target != "") {
		return errors.New("--split-cpus splits the CPUs between this process and the server children: not with --in-process or --target")
	}
	if f.target != "" {
		if f.inProcess {
			return errors.New("--in-process and --target are exclusive: a remote server is in neither process")
		}
		return f.checkTarget(c)
	}
	if f.family != 4 && f.family != 6 {
		return fmt.Errorf("--addr-family %d: must be 4 or 6", f.family)
	}
	c.Host = netip.IPv6Loopback()
	if f.family == 4 {
		c.Host = netip.MustParseAddr("127.0.0.1")
	}
	return nil
}

func (f *benchFlags) checkTarget(c *bench.Config) error {
	if len(c.Protocols) != 1 {
		return errors.New("--target takes one protocol in --proto, that of the server")
	}
	if p := c.Protocols[0]; p.LoopbackOnly() {
		return fmt.Errorf("--target: %s has no remote server (remote protocols: %s)", p.Name(),
			bench.ProtocolNames(remote))
	}
	if _, _, err := splitHostPort(f.target); err != nil {
		return fmt.Errorf("--target %q: %w", f.target, err)
	}
	if port, err := parsePort(f.target); c.Protocols[0].Homa() && err == nil && (port < 1 || port > sock.MaxServerPort) {
		return fmt.Errorf("--target %s: port %d is not a Homa server port (1..%d)", f.target, port, sock.MaxServerPort)
	}
	return nil
}

// checkLimits checks the numeric flags.
func (f *benchFlags) checkLimits(c *bench.Config) error {
	switch {
	case f.maxOut < 1:
		return fmt.Errorf("--max-outstanding %d: must be at least 1", f.maxOut)
	case f.calibrate < 0:
		return fmt.Errorf("--calibrate %d: must not be negative", f.calibrate)
	case f.replySize < 0 || f.replySize > 1_000_000:
		return fmt.Errorf("--reply-size %d: must be 0..1000000", f.replySize)
	case f.conns < 1:
		return fmt.Errorf("--conns %d: must be at least 1", f.conns)
	case f.loadMbps < 0:
		return fmt.Errorf("--load-mbps %v: must not be negative", f.loadMbps)
	}
	return f.engine.check()
}

// checkOutput checks the report flags.
func (f *benchFlags) checkOutput(c *bench.Config) error {
	if f.progressEvery <= 0 {
		return fmt.Errorf("--progress-interval %v: must be positive", f.progressEvery)
	}
	c.Every = f.progressEvery
	c.Progress = f.progress || !f.asJSON
	c.Verbose = f.progress
	c.Stats = f.stats
	if f.plot != "" {
		if ext := strings.ToLower(filepath.Ext(f.plot)); ext != ".svg" && ext != ".png" {
			return fmt.Errorf("--plot %q: the file name must end in .svg or .png", f.plot)
		}
		if err := bench.CheckPlot(f.plot); err != nil {
			return fmt.Errorf("--plot %s: %w", f.plot, err)
		}
	}
	return nil
}

// splitHostPort checks the form HOST:PORT.
func splitHostPort(s string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(s)
	if err == nil && port == "" {
		err = errors.New("no port")
	}
	return host, port, err
}

// serverExecutable is the program bench runs as "homa serve" for its
// server children: "" is this one. Tests replace it.
var serverExecutable string

// childStarted, if not nil, is told the process id of every server
// child; tests use it to check that none outlives bench.
var childStarted func(pid int)

// runBench is "homa bench": Homa against Go TCP, gRPC and the floors of
// plain UDP and raw sockets, and the RPC layers over Homa (erpc, the
// gRPC stub) against bare Homa and gRPC-go, on loopback with each server
// in a child process (or in this process), or against a remote server,
// in one of three modes; a table or JSON report, and optionally a
// slowdown plot (see package bench).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", benchSynopsis, stderr)
	var f benchFlags
	f.register(fs)
	var cfg *bench.Config
	check := func() error {
		var err error
		cfg, err = f.check(fs)
		return err
	}
	if code := parseFlags(fs, args, check); code >= 0 {
		return code
	}
	if cfg.Target != "" {
		addr, err := resolve(ctx, cfg.Target)
		if err != nil {
			return fail(stderr, "bench", bench.RemoteError(cfg.Target, err))
		}
		cfg.TargetAddr = addr
	}
	rep, err := bench.Run(ctx, cfg, stderr)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	if err := rep.Write(stdout, f.asJSON); err != nil {
		return fail(stderr, "bench", err)
	}
	if f.benchfmt != "" {
		if err := appendBenchfmt(f.benchfmt, rep); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	if f.plot != "" {
		what, err := rep.Plot(f.plot)
		if err != nil {
			return fail(stderr, "bench", err)
		}
		fmt.Fprintf(stderr, "homa bench: wrote %s (%s)\n", f.plot, what)
	}
	return 0
}

// appendBenchfmt appends the report's rows to the file name in the Go
// benchmark format (see bench.Report.WriteBenchfmt).
func appendBenchfmt(name string, rep *bench.Report) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := rep.WriteBenchfmt(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
