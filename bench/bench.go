package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
	"github.com/homa-go/homa/sock"
)

// The modes of a run.
const (
	Latency    = "latency"    // one RPC at a time
	Throughput = "throughput" // clients x outstanding RPCs, closed loop
	Workload   = "workload"   // open-loop Poisson arrivals at a load
)

// Config is one run, checked by the caller (cmd/homa checks its flags
// into one). Fields that concern one mode only are ignored by the
// others; a zero field marked with a default takes that default.
type Config struct {
	Mode      string     // Latency, Throughput or Workload
	Protocols []Protocol // measured in this order
	// Target is the remote server's HOST:PORT, or "" for servers on
	// Host; TargetAddr is what it resolved to.
	Target     string
	TargetAddr netip.AddrPort
	// InProcess runs each server in this process instead of a child.
	InProcess bool
	// SplitCPUs gives the clients and each server child CPUs of their
	// own, half of those this process may run on each (see Split CPUs);
	// not with InProcess or Target.
	SplitCPUs bool
	split     cpuSplit   // the halves, set by Run
	Host      netip.Addr // loopback address of the servers on this host (default 127.0.0.1)

	Dist           *workload.Dist // request sizes (default: all of Size bytes)
	Size           int            // the fixed request size, 0 with a workload distribution
	Count          int            // measured RPCs (latency, throughput)
	Warmup         int            // unmeasured RPCs first, one at a time
	Clients        int            // client sockets, pools or connections (default 1)
	Outstanding    int            // RPCs in flight per client (throughput; default 1)
	LoadMbps       float64        // offered request payload (workload)
	Duration       time.Duration  // of the loaded phase (workload; throughput: a bound, 0 none)
	MaxOutstanding int            // arrivals beyond this many in flight are dropped (workload; default 2000)
	Calibrate      int            // unloaded RPCs slowdowns are relative to (throughput, workload)
	Samples        string         // file for every measured RPC's size and RTT, or ""
	Seed           uint64         // of the request sizes and arrival times
	ReplySize      int            // >0: servers reply with this many bytes, else echo
	Conns          int            // TCP: connections in each client's pool (default 1)
	Engine         sock.Config    // Homa's engine tuning (its transport is set per protocol)
	Buckets        int            // message-size buckets of the slowdown table (default 1)
	Timeout        time.Duration  // of each protocol's run, besides Duration (default 1 minute)
	// Rounds, above 1, splits the measured phase (Count, or Duration in
	// workload mode) into that many rounds and runs the protocols in
	// turn, round by round, each round a run of its own (a fresh server
	// and clients, warmup and calibration), so that a machine whose load
	// drifts during the run weighs on every protocol alike; each row is
	// then all its rounds together, and reports each round's rate
	// (Result.RoundRates).
	Rounds int

	// Progress prints a line to the run's stderr every Every (default 1
	// second) while a phase runs; Verbose also names each server child's
	// process.
	Progress bool
	Verbose  bool
	// Stats adds up the counters of the client sockets of each Homa
	// protocol over its run and reports them (Result.ClientStats).
	Stats bool
	Every time.Duration

	// Executable is the program started as "Executable serve --parent
	// ..." for each server child; "" is this program (os.Executable),
	// which must then be cmd/homa or play it (see AnswerParent).
	Executable string
	// ChildStarted, if not nil, is told the process id of every server
	// child.
	ChildStarted func(pid int)
}

// withDefaults is c with the defaults of its zero fields.
func (c Config) withDefaults() Config {
	if c.Dist == nil {
		c.Dist = workload.FixedLarge(c.Size)
	}
	if !c.Host.IsValid() {
		c.Host = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	c.Clients, c.Outstanding, c.Conns, c.Buckets = max(c.Clients, 1), max(c.Outstanding, 1), max(c.Conns, 1), max(c.Buckets, 1)
	c.Rounds = max(c.Rounds, 1)
	if c.MaxOutstanding <= 0 {
		c.MaxOutstanding = 2000
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Minute
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	return c
}

// Run measures each protocol of cfg in turn and returns the report. A
// protocol that cannot run the configuration, or needs raw sockets the
// process may not open, is left out with a line on stderr saying why,
// and named in Report.Skipped; the run fails if none is left, or at the
// first protocol whose measurement fails. Progress goes to stderr.
func Run(ctx context.Context, cfg *Config, stderr io.Writer) (*Report, error) {
	c := cfg.withDefaults()
	if c.SplitCPUs {
		restore, err := c.confineClients()
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := restore(); err != nil {
				fmt.Fprintf(stderr, "homa bench: giving this process its CPUs back: %v\n", err)
			}
		}()
	}
	rep := newBenchReport(&c)
	if err := c.checkRaw(rep, stderr); err != nil {
		return nil, err
	}
	if err := benchAll(ctx, &c, rep, stderr); err != nil {
		return nil, err
	}
	if len(rep.Results) == 0 {
		return nil, errors.New("no protocol could be measured")
	}
	return rep, nil
}

// confineClients confines this process to the clients' half of its CPUs and
// keeps the server's half for the children (see Split CPUs); restore
// gives the process its CPUs back.
func (c *Config) confineClients() (restore func() error, err error) {
	if c.InProcess || c.Target != "" {
		return nil, errors.New("--split-cpus splits the CPUs between this process and the server children: not with --in-process or --target")
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	if c.split, err = splitCPUs(allowed); err != nil {
		return nil, err
	}
	return pinProcess(c.split.clients)
}

// executable is the program run as a server child.
func (c *Config) executable() (string, error) {
	if c.Executable != "" {
		return c.Executable, nil
	}
	return os.Executable()
}

// ParseProtocols turns a comma-separated list of protocol and set names
// into protocols, without duplicates, in the list's order; flagName
// starts its errors.
func ParseProtocols(flagName, list string) ([]Protocol, error) {
	var out []Protocol
	for _, name := range expandSets(list) {
		if name == "" {
			continue
		}
		p, ok := LookupProtocol(name)
		if !ok {
			return nil, fmt.Errorf("%s: unknown protocol %q (have %s, and the set %s)", flagName, name, ProtocolNames(all), setNames())
		}
		if !slices.ContainsFunc(out, func(q Protocol) bool { return q.name == name }) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no protocol named", flagName)
	}
	return out, nil
}

// all keeps every protocol.
func all(Protocol) bool { return true }

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

// rawAllowed reports whether this process may open a raw IP socket on
// local; an error other than a refusal is returned.
func rawAllowed(local netip.AddrPort) (bool, error) {
	s, err := openSocket(local, &sock.Config{Transport: sock.Raw})
	if errors.Is(err, sock.ErrPermission) {
		return false, nil
	}
	if err != nil {
		return false, OpenError(local, err)
	}
	return true, s.Close()
}

// checkRaw tries a raw socket before anything is measured, if a protocol
// of the run needs one. If the process may not open one, those protocols
// are left out, each with a line on stderr saying why; if that leaves
// none, the run fails at once, saying what is needed and what runs
// without it.
func (c *Config) checkRaw(rep *Report, stderr io.Writer) error {
	var raw []string
	for _, p := range c.Protocols {
		if p.raw {
			raw = append(raw, p.name)
		}
	}
	if len(raw) == 0 {
		return nil
	}
	local := netip.AddrPortFrom(c.Host, 0)
	if c.Target != "" {
		local = LocalFor(c.TargetAddr)
	}
	ok, err := rawAllowed(local)
	if ok || err != nil {
		return err
	}
	if len(raw) == len(c.Protocols) {
		return fmt.Errorf(`--proto %s needs raw IP sockets (CAP_NET_RAW), which this process may not open: `+
			`run as root or grant it with "%s"; --proto homa-udp measures Homa over UDP, which needs no privileges`,
			strings.Join(raw, ","), SetcapCommand())
	}
	kept := c.Protocols[:0:0]
	for _, p := range c.Protocols {
		if p.raw {
			rep.skip(stderr, p, NoRaw)
		} else {
			kept = append(kept, p)
		}
	}
	c.Protocols = kept
	return nil
}

// benchAll measures each protocol in turn, adding its row to rep; with
// Config.Rounds, round by round (see benchRounds).
func benchAll(ctx context.Context, cfg *Config, rep *Report, stderr io.Writer) error {
	var protos []Protocol
	for _, p := range cfg.Protocols {
		if reason := cfg.unsupported(p); reason != "" {
			rep.skip(stderr, p, reason)
			continue
		}
		protos = append(protos, p)
	}
	run := benchEach
	if cfg.Rounds > 1 {
		run = benchRounds
	}
	if err := run(ctx, cfg, protos, rep, stderr); err != nil {
		return err
	}
	rep.compareToFastest(cfg)
	rep.compareToTCP()
	rep.compareLayers()
	return nil
}

// benchEach measures the protocols one after the other, adding a row for
// each to rep.
func benchEach(ctx context.Context, cfg *Config, protos []Protocol, rep *Report, stderr io.Writer) error {
	for _, p := range protos {
		res, err := benchProtocol(ctx, p, cfg, stderr)
		if notPermitted(err) {
			rep.skip(stderr, p, NoRaw)
			continue
		}
		if err != nil {
			return fmt.Errorf("measuring %s: %w", p.name, err)
		}
		rep.Results = append(rep.Results, res)
	}
	return nil
}

// benchRounds runs the protocols in turn, Config.Rounds times, each run
// a round's share of the measured phase (Count, or Duration), and adds
// to rep a row for each protocol with all its rounds together and each
// round's rate. Each round draws its own sizes and arrivals, the same
// for every protocol.
func benchRounds(ctx context.Context, cfg *Config, protos []Protocol, rep *Report, stderr io.Writer) error {
	round := *cfg
	round.Count = (cfg.Count + cfg.Rounds - 1) / cfg.Rounds
	round.Duration = cfg.Duration / time.Duration(cfg.Rounds)
	runs := make([]*protoRun, len(protos))
	rates := make([][]float64, len(protos))
	skipped := make([]bool, len(protos))
	for k := range cfg.Rounds {
		round.Seed = cfg.Seed + uint64(k)
		for i, p := range protos {
			if skipped[i] {
				continue
			}
			if roundStarted != nil {
				roundStarted(k, p.name)
			}
			run, err := runProtocol(ctx, p, &round, stderr)
			if notPermitted(err) && k == 0 {
				rep.skip(stderr, p, NoRaw)
				skipped[i] = true
				continue
			}
			if err != nil {
				return fmt.Errorf("measuring %s, round %d of %d: %w", p.name, k+1, cfg.Rounds, err)
			}
			rate := 0.0
			if secs := run.m.elapsed.Seconds(); secs > 0 {
				rate = float64(len(run.m.samples)) / secs
			}
			rates[i] = append(rates[i], rate)
			if runs[i] == nil {
				runs[i] = &run
			} else {
				runs[i].join(run)
			}
		}
	}
	for i, p := range protos {
		if runs[i] == nil {
			continue
		}
		res, err := runs[i].result(p, cfg)
		if err != nil {
			return err
		}
		res.RoundRates = rates[i]
		rep.Results = append(rep.Results, res)
	}
	return nil
}

// roundStarted, if set (by tests), is told of each run of benchRounds.
var roundStarted func(round int, protocol string)

// unsupported says why p cannot run this configuration, or "".
func (c *Config) unsupported(p Protocol) string {
	largest := max(c.Dist.Max(), c.ReplySize)
	if p.clip && c.Size == 0 {
		largest = c.ReplySize // a workload's largest requests are clipped
	}
	limit := p.maxSize
	if p.LoopbackOnly() && c.Mode == Throughput {
		limit = p.rateMaxSize
	}
	if largest > limit {
		return fmt.Sprintf("%d-byte messages exceed its %d-byte limit", largest, limit)
	}
	if c.ReplySize > 0 && p.LoopbackOnly() {
		return "it echoes only (no --reply-size)"
	}
	if p.maxClients > 0 && c.Clients > p.maxClients {
		return fmt.Sprintf("%d clients exceed its %d", c.Clients, p.maxClients)
	}
	return ""
}
