package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/homa-go/homa/internal/tools/workload"
)

// Experiment is one protocol's measurement in a Lab: an echo server in
// host 1, a calibration client in host 2, then clients in hosts 2..N
// loading host 1's downlink at once. The programs are this project's
// "homa serve" and "homa bench --mode workload".
type Experiment struct {
	// Exe is the homa command's executable.
	Exe string
	// Proto is the protocol, as serve and bench name it: homa,
	// homa-udp, tcp or grpc.
	Proto string
	// Workload names the message-size distribution ("w4").
	Workload string
	// Port is the server's port on host 1.
	Port uint16
	// ReplySize is the size of every response (0: echo the request).
	ReplySize int
	// LinkMbps is the hosts' link rate, for the Homa pacer of the
	// server and the clients.
	LinkMbps float64
	// UnschedBytes sets the Homa engine's unscheduled bytes on every
	// host (0: the engine's default).
	UnschedBytes int
	// Polling is the Homa engine's --polling mode on every host
	// (adaptive, always or never; empty: the engine's default, adaptive).
	Polling string
	// LoadMbps is the offered load of request bytes into host 1, shared
	// evenly by the clients.
	LoadMbps float64
	// Duration is the length of the loaded phase.
	Duration time.Duration
	// Calibrate is the number of unloaded RPCs, one at a time, that the
	// baseline is built from.
	Calibrate int
	// Timeout is how long a client may run beyond the time its phase is
	// planned to take (the loaded phase: Duration; calibration: none)
	// before it gives up; zero means DefaultTimeout. A client that does
	// not give up by itself is stopped a little later.
	Timeout time.Duration
	// Seed makes the clients' random sizes and arrivals repeatable;
	// client i uses Seed+i.
	Seed uint64
	// Dir is where the samples files go.
	Dir string
	// Log, if set, gets progress lines and the programs' output.
	Log io.Writer
}

// Samples are the round trips of one Experiment.
type Samples struct {
	Calib  []workload.Sample // unloaded, one at a time, from host 2
	Loaded []workload.Sample // under load, all clients
	// QueueDrops counts the packets the switch dropped at host 1's
	// downlink during the loaded phase (full queues); SocketDrops the
	// packets host 1's raw and UDP sockets dropped (full receive
	// buffers) while the server ran.
	QueueDrops, SocketDrops uint64
}

// DefaultTimeout is an Experiment's Timeout when it has none.
const DefaultTimeout = time.Minute

const (
	// serverStartTimeout bounds the wait for the server's ready line.
	serverStartTimeout = 30 * time.Second
	// backstop is how long after its own timeout a client is stopped.
	backstop = 15 * time.Second
)

// timeout is e's Timeout.
func (e *Experiment) timeout() time.Duration {
	if e.Timeout <= 0 {
		return DefaultTimeout
	}
	return e.Timeout
}

// ServerReady recognises the line "homa serve" prints once it listens.
func ServerReady(line string) bool {
	return strings.HasPrefix(line, "homa: ") && strings.Contains(line, " server on ")
}

// ServerAddr is the address the server of an Experiment listens on.
func (l *Lab) ServerAddr(e *Experiment) netip.AddrPort {
	return netip.AddrPortFrom(l.Hosts[0].Addr, e.Port)
}

// Run runs e: it starts the server, calibrates, runs the loaded phase and
// stops the server, and returns the samples. Every process it starts is
// stopped before it returns, also when ctx ends.
func (l *Lab) Run(ctx context.Context, e *Experiment) (*Samples, error) {
	srv, err := l.startServer(ctx, e)
	if err != nil {
		return nil, err
	}
	defer srv.Stop(stopGrace)
	var s Samples
	if s.Calib, err = l.calibrate(ctx, e); err != nil {
		return nil, err
	}
	if err := l.loadCounted(ctx, e, &s); err != nil {
		return nil, err
	}
	select {
	case <-srv.Exited():
		return nil, srv.exitError(errors.New("the server exited during the run"))
	default:
	}
	if err := srv.Stop(stopGrace); err != nil {
		return nil, srv.exitError(err)
	}
	return &s, nil
}

// startServer starts "homa serve" in host 1 and waits until it is ready.
func (l *Lab) startServer(ctx context.Context, e *Experiment) (*Proc, error) {
	addr := l.ServerAddr(e).String()
	l.logf(e, "%s: starting the server in h1 on %s", e.Proto, addr)
	srv, err := l.Start(l.Hosts[0], Command{
		Args:  l.serveArgs(e),
		Ready: ServerReady,
		Log:   e.Log,
	})
	if err != nil {
		return nil, err
	}
	if err := srv.WaitReady(ctx, serverStartTimeout); err != nil {
		srv.Stop(stopGrace)
		return nil, err
	}
	return srv, nil
}

// loadCounted runs the loaded phase and fills in s.Loaded and the drop
// counters, read while the server still runs.
func (l *Lab) loadCounted(ctx context.Context, e *Experiment, s *Samples) error {
	server := l.Hosts[0]
	before, err := l.PortDrops(server)
	if err != nil {
		return err
	}
	if s.Loaded, err = l.load(ctx, e); err != nil {
		return err
	}
	after, err := l.PortDrops(server)
	if err != nil {
		return err
	}
	s.QueueDrops = after - before
	s.SocketDrops, err = l.SocketDrops(server)
	return err
}

// serveArgs returns the server's command line.
func (l *Lab) serveArgs(e *Experiment) []string {
	return append([]string{e.Exe, "serve", "--proto", e.Proto, "--addr", l.ServerAddr(e).String(),
		"--reply-size", strconv.Itoa(e.ReplySize), "--link-mbps", strconv.Itoa(int(e.LinkMbps)),
		"--unsched-bytes", strconv.Itoa(e.UnschedBytes)}, e.pollingArgs()...)
}

// benchArgs returns the bench command line shared by both phases; the
// client gives up after timeout.
func (l *Lab) benchArgs(e *Experiment, seed uint64, timeout time.Duration) []string {
	return append([]string{e.Exe, "bench", "--mode", "workload", "--proto", e.Proto,
		"--target", l.ServerAddr(e).String(), "--workload", e.Workload,
		"--reply-size", strconv.Itoa(e.ReplySize), "--seed", strconv.FormatUint(seed, 10),
		"--link-mbps", strconv.Itoa(int(e.LinkMbps)), "--unsched-bytes", strconv.Itoa(e.UnschedBytes),
		"--timeout", timeout.String()}, e.pollingArgs()...)
}

// pollingArgs returns the --polling flag of serve and bench, if set.
func (e *Experiment) pollingArgs() []string {
	if e.Polling == "" {
		return nil
	}
	return []string{"--polling", e.Polling}
}

// calibrate runs Calibrate RPCs one at a time from host 2.
func (l *Lab) calibrate(ctx context.Context, e *Experiment) ([]workload.Sample, error) {
	file := filepath.Join(e.Dir, e.Proto+"-calib.csv")
	args := append(l.benchArgs(e, e.Seed, e.timeout()),
		"--calibrate", strconv.Itoa(e.Calibrate), "--duration", "0", "--samples", file)
	l.logf(e, "%s: calibrating with %d RPCs from h2", e.Proto, e.Calibrate)
	p, err := l.Start(l.Hosts[1], Command{Args: args, Log: e.Log})
	if err != nil {
		return nil, err
	}
	if err := p.Wait(ctx, e.timeout()+backstop); err != nil {
		return nil, err
	}
	return readSamples(file + ".calib")
}

// load runs the loaded phase: one client in each of hosts 2..N at once,
// each offering LoadMbps/(N-1).
func (l *Lab) load(ctx context.Context, e *Experiment) ([]workload.Sample, error) {
	clients := l.Hosts[1:]
	per := e.LoadMbps / float64(len(clients))
	l.logf(e, "%s: loading h1 from h2..h%d, %.1f Mbit/s each, for %v", e.Proto, len(l.Hosts), per, e.Duration)
	files := make([]string, len(clients))
	procs := make([]*Proc, len(clients))
	for i, h := range clients {
		files[i] = filepath.Join(e.Dir, fmt.Sprintf("%s-h%d.csv", e.Proto, h.Index))
		args := append(l.benchArgs(e, e.Seed+uint64(h.Index), e.Duration+e.timeout()),
			"--calibrate", "0", "--load-mbps", formatFloat(per),
			"--duration", e.Duration.String(), "--samples", files[i])
		p, err := l.Start(h, Command{Args: args, Log: e.Log})
		if err != nil {
			stopAll(procs)
			return nil, err
		}
		procs[i] = p
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Wait(ctx, e.Duration+e.timeout()+backstop) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var all []workload.Sample
	for _, f := range files {
		s, err := readSamples(f)
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return all, nil
}

// stopAll stops the processes that were started.
func stopAll(procs []*Proc) {
	for _, p := range procs {
		if p != nil {
			p.Stop(stopGrace)
		}
	}
}

// readSamples reads a samples file written by bench.
func readSamples(path string) ([]workload.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := workload.ReadSamples(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// logf writes one progress line to e.Log.
func (l *Lab) logf(e *Experiment, format string, a ...any) {
	if e.Log == nil {
		return
	}
	l.logMu.Lock()
	defer l.logMu.Unlock()
	fmt.Fprintf(e.Log, "lab: "+format+"\n", a...)
}

// formatFloat writes v as briefly as possible.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
