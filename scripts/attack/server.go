package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The server under attack: a "homa serve" child process on raw IP, its
// memory as the OS sees it (/proc/PID/status) and its Prometheus
// metrics.

const (
	// startTimeout bounds how long the server may take to say where it
	// listens.
	startTimeout = 15 * time.Second
	// stopTimeout is how long the server has to exit after SIGTERM
	// before it is killed.
	stopTimeout = 5 * time.Second
)

// server is a running "homa serve".
type server struct {
	cmd     *exec.Cmd
	out     *announcements
	addr    netip.AddrPort // the Homa address it serves
	metrics string         // URL of its metrics
	client  http.Client
	exited  chan struct{} // closed when Wait returned
	waitErr error         // Wait's result, once exited is closed
	stopped sync.Once
}

// startServer starts "homa serve" on a free port of 127.0.0.1 with
// metrics, and extra flags, and waits until it has said where it
// listens. The caller must call stop.
func startServer(ctx context.Context, homa string, extra ...string) (*server, error) {
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(homa, args...)
	out := newAnnouncements()
	cmd.Stdout = out
	cmd.Stderr = out
	// If this process dies without stopping it, the kernel kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(homa), err)
	}
	s := &server{cmd: cmd, out: out, exited: make(chan struct{}), client: http.Client{Timeout: 10 * time.Second}}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-out.ready:
	case <-s.exited:
		return nil, fmt.Errorf("homa serve exited before it listened (%v): %s", s.waitErr, out.tail())
	case <-timer.C:
		s.stop()
		return nil, fmt.Errorf("homa serve did not say where it listens within %v: %s", startTimeout, out.tail())
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	var err error
	if s.addr, err = netip.ParseAddrPort(out.serverAddr); err != nil {
		s.stop()
		return nil, fmt.Errorf("homa serve listens on %q: %w", out.serverAddr, err)
	}
	s.metrics = out.metricsURL
	return s, nil
}

// pid is the server's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// stop ends the server (SIGTERM, then SIGKILL after stopTimeout) and
// waits for it. It is idempotent.
func (s *server) stop() {
	s.stopped.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			return
		case <-time.After(stopTimeout):
		}
		s.cmd.Process.Kill()
		<-s.exited
	})
}

// announcements is the server's output: it watches for the lines that
// give the addresses, and keeps the last lines for error messages.
type announcements struct {
	mu         sync.Mutex
	partial    []byte
	lines      []string // the last few
	serverAddr string
	metricsURL string
	ready      chan struct{} // closed when both addresses are known
}

func newAnnouncements() *announcements { return &announcements{ready: make(chan struct{})} }

// The lines "homa serve" prints (cmd/homa/serve.go, metrics.go).
const (
	serverPrefix  = "homa: echo server on "
	metricsPrefix = "homa: metrics at "
)

func (a *announcements) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.partial = append(a.partial, p...)
	for {
		i := bytes.IndexByte(a.partial, '\n')
		if i < 0 {
			break
		}
		a.line(string(a.partial[:i]))
		a.partial = a.partial[i+1:]
	}
	return len(p), nil
}

// line looks at one line of output.
func (a *announcements) line(l string) {
	a.lines = append(a.lines, l)
	if len(a.lines) > 10 {
		a.lines = a.lines[1:]
	}
	known := a.serverAddr != "" && a.metricsURL != ""
	switch {
	case strings.HasPrefix(l, serverPrefix):
		a.serverAddr, _, _ = strings.Cut(strings.TrimPrefix(l, serverPrefix), " ")
	case strings.HasPrefix(l, metricsPrefix):
		a.metricsURL = strings.TrimPrefix(l, metricsPrefix)
	}
	if !known && a.serverAddr != "" && a.metricsURL != "" {
		close(a.ready)
	}
}

// tail returns the last lines of output.
func (a *announcements) tail() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.lines) == 0 {
		return "(no output)"
	}
	return strings.Join(a.lines, " | ")
}

// memory is the server's memory as the OS sees it.
type memory struct {
	RSS  int64 // resident now (VmRSS), bytes
	Peak int64 // the most resident since it started (VmHWM), bytes
}

// memory reads /proc/PID/status.
func (s *server) memory() (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid()))
	if err != nil {
		return memory{}, err
	}
	var m memory
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(val) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return memory{}, fmt.Errorf("/proc/%d/status: %s: %q", s.pid(), name, val)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("/proc/%d/status: %s: %w", s.pid(), name, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
	}
	if m.RSS == 0 || m.Peak == 0 {
		return memory{}, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", s.pid())
	}
	return m, nil
}

// metricSet is one scrape: the value of every counter and gauge, by
// name and labels, as `name{a="x",b="y"}` with the labels sorted and
// the label socket (always "server") left out; a series without labels
// is its name alone.
type metricSet map[string]float64

// get returns the value of a series, 0 if absent.
func (m metricSet) get(name string, labels ...string) float64 {
	if len(labels) == 0 {
		return m[name]
	}
	return m[name+"{"+strings.Join(labels, ",")+"}"]
}

// byLabel returns the nonzero series of a metric with one label, as
// "value=count" pairs sorted by value, for reports.
func (m metricSet) byLabel(name, label string) string {
	var parts []string
	prefix := name + "{" + label + "=\""
	for k, v := range m {
		if v == 0 || !strings.HasPrefix(k, prefix) {
			continue
		}
		lv, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "\"")
		parts = append(parts, fmt.Sprintf("%s=%.0f", lv, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// scrape fetches the server's metrics.
func (s *server) scrape(ctx context.Context) (metricSet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.metrics, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: GET %s: %s", s.metrics, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	set := make(metricSet)
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			var v float64
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			var labels []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "socket" {
					labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			set[key] = v
		}
	}
	return set, nil
}

// settle waits until the server has taken in what was sent: until the
// packets it counts (received, or dropped by its socket) stop growing
// for a while, or reach want, or the deadline passes. It returns the
// last scrape.
func (s *server) settle(ctx context.Context, want float64, within time.Duration) (metricSet, error) {
	deadline := time.Now().Add(within)
	var last float64 = -1
	still := 0
	for {
		m, err := s.scrape(ctx)
		if err != nil {
			return nil, err
		}
		n := m.get("homa_packets_received_total", `type="data"`) + m.get("homa_packets_dropped_total", `reason="socket"`)
		if n == last {
			still++
		} else {
			still = 0
		}
		last = n
		if n >= want || still >= 5 || time.Now().After(deadline) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errServerGone is returned when the server exited during a scenario.
var errServerGone = errors.New("homa serve exited")

// alive fails if the server has exited.
func (s *server) alive() error {
	select {
	case <-s.exited:
		return fmt.Errorf("%w (%v): %s", errServerGone, s.waitErr, s.out.tail())
	default:
		return nil
	}
}

// kernelDrops returns the packets the kernel dropped at the server's raw
// sockets because their receive buffer was full: the drops column of
// /proc/PID/net/raw for the sockets the process holds. The engine does
// not see these.
func (s *server) kernelDrops() (uint64, error) {
	dir := fmt.Sprintf("/proc/%d/fd", s.pid())
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	inodes := make(map[string]bool)
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if in, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(in, "]")] = true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/raw", s.pid()))
	if err != nil {
		return 0, err
	}
	var drops uint64
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 13 || !inodes[f[9]] {
			continue // the header, or another process's socket
		}
		n, err := strconv.ParseUint(f[12], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/net/raw: drops %q: %w", s.pid(), f[12], err)
		}
		drops += n
	}
	return drops, nil
}
