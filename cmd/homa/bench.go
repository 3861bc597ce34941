package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/homa-go/homa/internal/workload"
	"github.com/homa-go/homa/sock"
)

// The modes of bench.
const (
	modeLatency    = "latency"    // one RPC at a time
	modeThroughput = "throughput" // clients x outstanding RPCs, closed loop
	modeWorkload   = "workload"   // open-loop Poisson arrivals at a load
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

const benchSynopsis = "[--mode latency|throughput|workload] [--proto LIST] [--target HOST:PORT | --in-process]\n" +
	"       [--size N | --workload w1..w5] [--count N] [--warmup N] [--clients M] [--outstanding N]\n" +
	"       [--load-mbps X] [--duration D] [--max-outstanding N] [--calibrate N] [--samples FILE] [--seed S]\n" +
	"       [--reply-size N] [--conns N] [--link-mbps M] [--unsched-bytes N] [--poll D] [--buckets N] [--addr-family 4|6] [--timeout D]\n" +
	"       [--json] [--progress] [--plot FILE.svg|FILE.png]"

// benchFlags are the flags of bench as given.
type benchFlags struct {
	load                                 loadFlags
	mode, proto, vs, target, dist        string
	samples, plot                        string
	family, clients, outstanding, maxOut int
	calibrate, replySize, conns, buckets int
	loadMbps                             float64
	duration, progressEvery              time.Duration
	seed                                 uint64
	asJSON, progress, inProcess          bool
	engine                               engineFlags
	set                                  map[string]bool // flags on the command line
}

func (f *benchFlags) register(fs *flag.FlagSet) {
	f.load.register(fs, 10000)
	fs.StringVar(&f.mode, "mode", modeLatency, "`mode`: latency (one RPC at a time), throughput (clients x outstanding, closed loop), workload (open-loop Poisson arrivals)")
	fs.StringVar(&f.proto, "proto", "", "comma-separated `protocols` to run: "+protocolNames(all)+
		"; \"layers\" is "+protocolSets["layers"]+" (default: the transports the mode supports, the RPC layers left out)")
	fs.StringVar(&f.vs, "vs", "", "comma-separated `baselines` to run after homa and homa-udp (the older form of --proto)")
	hide(fs, "vs")
	fs.StringVar(&f.target, "target", "", "`HOST:PORT` of a remote server (homa serve --proto P); no server in this process; one --proto")
	fs.BoolVar(&f.inProcess, "in-process", false, "run each server in this process (default: in a child process, homa serve, so that client and server are two processes)")
	fs.StringVar(&f.dist, "workload", "", "draw request sizes from `W`: w1..w5 (instead of --size)")
	fs.IntVar(&f.clients, "clients", 0, "`M` clients: Homa sockets, TCP connection pools or gRPC connections (default 4 in throughput mode, else 1)")
	fs.IntVar(&f.outstanding, "outstanding", 0, "RPCs in flight per client in throughput mode (default 32)")
	fs.Float64Var(&f.loadMbps, "load-mbps", 0, "workload mode: offered load of `X` Mbit/s of request payload")
	fs.DurationVar(&f.duration, "duration", 0, "workload mode: length of the loaded phase (default 5s; 0 skips it); throughput mode: stop after this long (default: at --count)")
	fs.IntVar(&f.maxOut, "max-outstanding", defaultMaxOutstanding, "workload mode: arrivals beyond this many RPCs in flight are dropped and counted")
	fs.IntVar(&f.calibrate, "calibrate", defaultCalibrate, "unloaded RPCs, one at a time, whose RTTs slowdowns are relative to (throughput and workload modes; 0 skips)")
	fs.StringVar(&f.samples, "samples", "", "write every measured RPC's size,rtt_ns to `FILE`, and the calibration's to FILE.calib")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the request sizes and arrival times")
	fs.IntVar(&f.replySize, "reply-size", 0, "replies are `N` bytes (the first N of the request, zero-padded); 0 echoes; must match a remote server's")
	fs.IntVar(&f.conns, "conns", defaultConns, "tcp: connections in each client's pool")
	f.engine.register(fs)
	fs.IntVar(&f.buckets, "buckets", 0, "message-size buckets of the slowdown table (default 10 with --workload, else 1)")
	fs.IntVar(&f.family, "addr-family", 4, "IP version of the loopback address: 4 or 6")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&f.progress, "progress", false, "print progress to stderr even with --json, and the process id of each server")
	fs.DurationVar(&f.progressEvery, "progress-interval", time.Second, "time between progress lines")
	fs.StringVar(&f.plot, "plot", "", "draw slowdown against message size per protocol into `FILE` (.svg or .png)")
}

// all keeps every protocol.
func all(protocol) bool { return true }

// benchConfig is a checked bench run.
type benchConfig struct {
	mode        string
	protos      []protocol
	target      string         // remote server, or ""
	inProcess   bool           // servers in this process, not in children
	targetAddr  netip.AddrPort // resolved at the start of the run
	host        netip.Addr     // loopback address of in-process servers
	dist        *workload.Dist
	size        int // fixed request size, 0 with a workload
	count       int
	warmup      int
	clients     int
	outstanding int
	loadMbps    float64
	duration    time.Duration
	maxOut      int
	calibrate   int
	samples     string
	seed        uint64
	replySize   int
	conns       int
	engine      sock.Config // Homa's engine tuning (its transport is set per protocol)
	buckets     int
	timeout     time.Duration
	asJSON      bool
	progress    bool
	verbose     bool // --progress given: also say which process serves
	every       time.Duration
	plot        string
}

// check validates the flags and builds the run's configuration.
func (f *benchFlags) check(fs *flag.FlagSet) (*benchConfig, error) {
	f.set = make(map[string]bool)
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.load.check(); err != nil {
		return nil, err
	}
	c := &benchConfig{mode: f.mode, count: f.load.count, warmup: f.load.warmup, timeout: f.load.timeout,
		target: f.target, inProcess: f.inProcess, samples: f.samples, seed: f.seed, replySize: f.replySize, conns: f.conns, engine: f.engine.config(),
		asJSON: f.asJSON, plot: f.plot, maxOut: f.maxOut, calibrate: f.calibrate, loadMbps: f.loadMbps}
	for _, step := range []func(*benchConfig) error{f.checkMode, f.checkSizes, f.checkProtocols, f.checkLimits, f.checkOutput} {
		if err := step(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkMode sets what depends on the mode: clients, outstanding RPCs,
// duration, warmup.
func (f *benchFlags) checkMode(c *benchConfig) error {
	switch {
	case f.set["clients"] && f.clients < 1:
		return fmt.Errorf("--clients %d: must be at least 1", f.clients)
	case f.set["outstanding"] && f.outstanding < 1:
		return fmt.Errorf("--outstanding %d: must be at least 1", f.outstanding)
	case f.duration < 0:
		return fmt.Errorf("--duration %v: must not be negative", f.duration)
	}
	c.clients, c.outstanding = 1, 1
	switch f.mode {
	case modeLatency:
		if f.set["clients"] && f.clients != 1 || f.set["outstanding"] && f.outstanding != 1 {
			return errors.New("latency mode has one client with one RPC at a time; use --mode throughput")
		}
		if f.set["load-mbps"] || f.set["duration"] || f.set["max-outstanding"] {
			return errors.New("--load-mbps, --duration and --max-outstanding need --mode workload (or throughput for --duration)")
		}
		if f.set["calibrate"] {
			return errors.New("--calibrate is for throughput and workload modes (a latency run is its own unloaded baseline)")
		}
	case modeThroughput:
		c.clients = f.pick("clients", f.clients, defaultClients)
		c.outstanding = f.pick("outstanding", f.outstanding, defaultOutstanding)
		c.duration = f.duration
		if f.set["load-mbps"] || f.set["max-outstanding"] {
			return errors.New("--load-mbps and --max-outstanding need --mode workload")
		}
	case modeWorkload:
		c.clients = f.pick("clients", f.clients, 1)
		c.duration = defaultDuration
		if f.set["duration"] {
			c.duration = f.duration
		}
		if f.set["outstanding"] {
			return errors.New("--outstanding is for --mode throughput; workload mode bounds RPCs in flight with --max-outstanding")
		}
		if c.duration > 0 && !(f.loadMbps > 0) {
			return fmt.Errorf("--load-mbps %v: workload mode needs a positive load", f.loadMbps)
		}
		if !f.set["warmup"] {
			c.warmup = 0 // the calibration warms up; a remote server sees only the phases asked for
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
func (f *benchFlags) checkSizes(c *benchConfig) error {
	if f.dist != "" {
		if f.set["size"] {
			return errors.New("--size and --workload are exclusive")
		}
		d, err := workload.Named(f.dist)
		if err != nil {
			return fmt.Errorf("--workload %q: %w", f.dist, err)
		}
		c.dist, c.buckets = d, defaultBuckets
	} else {
		c.dist, c.size, c.buckets = workload.Fixed(f.load.size), f.load.size, 1
	}
	if f.set["buckets"] {
		if f.buckets < 1 {
			return fmt.Errorf("--buckets %d: must be at least 1", f.buckets)
		}
		c.buckets = f.buckets
	}
	return nil
}

// checkProtocols picks the protocols and the addresses.
func (f *benchFlags) checkProtocols(c *benchConfig) error {
	if f.proto != "" && f.vs != "" {
		return errors.New("--proto and --vs are exclusive")
	}
	var err error
	switch {
	case f.proto != "":
		c.protos, err = parseProtocols("--proto", f.proto)
	case f.vs != "":
		c.protos, err = parseProtocols("--vs", "homa,homa-udp,"+f.vs)
	default:
		for _, p := range protocols {
			if !p.layer && p.measuredIn(c.mode) {
				c.protos = append(c.protos, p)
			}
		}
	}
	if err != nil {
		return err
	}
	for _, p := range c.protos {
		if !p.measuredIn(c.mode) {
			return fmt.Errorf("%s is not measured in %s mode (which takes %s)", p.name, c.mode,
				protocolNames(func(p protocol) bool { return p.measuredIn(c.mode) }))
		}
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
	c.host = netip.IPv6Loopback()
	if f.family == 4 {
		c.host = netip.MustParseAddr("127.0.0.1")
	}
	return nil
}

func (f *benchFlags) checkTarget(c *benchConfig) error {
	if f.proto == "" || len(c.protos) != 1 {
		return errors.New("--target needs exactly one protocol in --proto")
	}
	if p := c.protos[0]; p.loopbackOnly() {
		return fmt.Errorf("--target: %s has no remote server (remote protocols: %s)", p.name,
			protocolNames(func(p protocol) bool { return !p.loopbackOnly() }))
	}
	if _, _, err := splitHostPort(f.target); err != nil {
		return fmt.Errorf("--target %q: %w", f.target, err)
	}
	return nil
}

// parseProtocols turns a comma-separated list into protocols, without
// duplicates, in the list's order.
func parseProtocols(flagName, list string) ([]protocol, error) {
	var out []protocol
	for _, name := range expandSets(list) {
		if name == "" {
			continue
		}
		p, ok := lookupProtocol(name)
		if !ok {
			return nil, fmt.Errorf("%s: unknown protocol %q (have %s, and the set %s)", flagName, name, protocolNames(all), setNames())
		}
		if !slices.ContainsFunc(out, func(q protocol) bool { return q.name == name }) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no protocol named", flagName)
	}
	return out, nil
}

// expandSets splits a comma-separated list of protocols, replacing the
// name of a set by its members.
func expandSets(list string) []string {
	var names []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if set, ok := protocolSets[name]; ok {
			names = append(names, strings.Split(set, ",")...)
		} else {
			names = append(names, name)
		}
	}
	return names
}

// setNames lists the names of the protocol sets.
func setNames() string {
	return strings.Join(slices.Sorted(maps.Keys(protocolSets)), ",")
}

// checkLimits checks the numeric flags.
func (f *benchFlags) checkLimits(c *benchConfig) error {
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
func (f *benchFlags) checkOutput(c *benchConfig) error {
	if f.progressEvery <= 0 {
		return fmt.Errorf("--progress-interval %v: must be positive", f.progressEvery)
	}
	c.every = f.progressEvery
	c.progress = f.progress || !f.asJSON
	c.verbose = f.progress
	if f.plot != "" {
		if ext := strings.ToLower(filepath.Ext(f.plot)); ext != ".svg" && ext != ".png" {
			return fmt.Errorf("--plot %q: the file name must end in .svg or .png", f.plot)
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

// runBench is "homa bench": Homa against Go TCP, gRPC and the floors of
// plain UDP and raw sockets, and the RPC layers over Homa (erpc, the
// gRPC stub) against bare Homa and gRPC-go, on loopback with each server
// in a child process (or in this process), or against a remote server,
// in one of three modes; a table or JSON report, and optionally a
// slowdown plot.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", benchSynopsis, stderr)
	var f benchFlags
	f.register(fs)
	var cfg *benchConfig
	check := func() error {
		var err error
		cfg, err = f.check(fs)
		return err
	}
	if code := parseFlags(fs, args, check); code >= 0 {
		return code
	}
	if cfg.target != "" {
		addr, err := resolve(ctx, cfg.target)
		if err != nil {
			return fail(stderr, "bench", remoteError(cfg.target, err))
		}
		cfg.targetAddr = addr
	}
	rep := newBenchReport(cfg)
	if err := cfg.checkRaw(rep, stderr); err != nil {
		return fail(stderr, "bench", err)
	}
	if err := benchAll(ctx, cfg, rep, stderr); err != nil {
		return fail(stderr, "bench", err)
	}
	if len(rep.Results) == 0 {
		return fail(stderr, "bench", errors.New("no protocol could be measured"))
	}
	if err := rep.write(stdout, cfg.asJSON); err != nil {
		return fail(stderr, "bench", err)
	}
	if cfg.plot != "" {
		if err := rep.plot(cfg.plot); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	return 0
}

// rawAllowed reports whether this process may open a raw IP socket on
// local; an error other than a refusal is returned.
func rawAllowed(local netip.AddrPort) (bool, error) {
	s, err := openSocket(local, &sock.Config{Transport: sock.Raw})
	if errors.Is(err, sock.ErrPermission) {
		return false, nil
	}
	if err != nil {
		return false, openError(local, err)
	}
	return true, s.Close()
}

// checkRaw tries a raw socket before anything is measured, if a protocol
// of the run needs one. If the process may not open one, those protocols
// are left out, each with a line on stderr saying why; if that leaves
// none, the run fails at once, saying what is needed and what runs
// without it.
func (c *benchConfig) checkRaw(rep *benchReport, stderr io.Writer) error {
	var raw []string
	for _, p := range c.protos {
		if p.raw {
			raw = append(raw, p.name)
		}
	}
	if len(raw) == 0 {
		return nil
	}
	local := netip.AddrPortFrom(c.host, 0)
	if c.target != "" {
		local = localFor(c.targetAddr)
	}
	ok, err := rawAllowed(local)
	if ok || err != nil {
		return err
	}
	if len(raw) == len(c.protos) {
		return fmt.Errorf(`--proto %s needs raw IP sockets (CAP_NET_RAW), which this process may not open: `+
			`run as root or grant it with "setcap cap_net_raw+ep homa"; --proto homa-udp measures Homa over UDP, which needs no privileges`,
			strings.Join(raw, ","))
	}
	kept := c.protos[:0:0]
	for _, p := range c.protos {
		if p.raw {
			rep.skip(stderr, p, noRaw)
		} else {
			kept = append(kept, p)
		}
	}
	c.protos = kept
	return nil
}

// benchAll measures each protocol in turn, adding its row to rep.
func benchAll(ctx context.Context, cfg *benchConfig, rep *benchReport, stderr io.Writer) error {
	for _, p := range cfg.protos {
		if reason := cfg.unsupported(p); reason != "" {
			rep.skip(stderr, p, reason)
			continue
		}
		res, err := benchProtocol(ctx, p, cfg, stderr)
		if notPermitted(err) {
			rep.skip(stderr, p, noRaw)
			continue
		}
		if err != nil {
			return fmt.Errorf("measuring %s: %w", p.name, err)
		}
		rep.Results = append(rep.Results, res)
	}
	rep.compareToTCP()
	rep.compareLayers()
	return nil
}

// unsupported says why p cannot run this configuration, or "".
func (c *benchConfig) unsupported(p protocol) string {
	largest := max(c.dist.Max(), c.replySize)
	if p.clip && c.size == 0 {
		largest = c.replySize // a workload's largest requests are clipped
	}
	limit := p.maxSize
	if p.loopbackOnly() && c.mode == modeThroughput {
		limit = p.rateMaxSize
	}
	if largest > limit {
		return fmt.Sprintf("%d-byte messages exceed its %d-byte limit", largest, limit)
	}
	if c.replySize > 0 && p.loopbackOnly() {
		return "it echoes only (no --reply-size)"
	}
	if p.maxClients > 0 && c.clients > p.maxClients {
		return fmt.Sprintf("%d clients exceed its %d", c.clients, p.maxClients)
	}
	return ""
}
