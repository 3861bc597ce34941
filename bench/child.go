package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// By default bench runs each protocol's server as a child process, the
// same program as "homa serve --parent", so that the figures are those
// of two processes, as users run them. The child talks with bench over
// its standard input and output:
//
//	child:  homa: P server on ADDR          when it serves
//	bench:  cpu                             (a line on the child's stdin)
//	child:  homa: cpu ns N                  its user+system CPU time so far
//	bench:  stats                           (with --stats)
//	child:  homa: stats JSON                its Homa socket's counters (SocketStats; null: none)
//	bench:  (closes the child's stdin)      to stop it
//	child:  homa: P server stopped after N requests
//
// A child never outlives bench: it stops when its standard input closes,
// which the kernel does when bench exits however it exits; on Linux it
// is also killed when the thread that started it ends (Pdeathsig). It
// runs in a process group of its own, so that a Ctrl-C at the terminal
// reaches bench alone, which then stops it.

const (
	// childStartTimeout bounds the wait for a child to say it serves.
	childStartTimeout = 20 * time.Second
	// childReplyTimeout bounds the wait for the answer to a cpu query.
	childReplyTimeout = 10 * time.Second
	// childStopGrace is how long a child has to stop once its standard
	// input closes, before it is killed.
	childStopGrace = 5 * time.Second
	// childTail is how much of a child's standard error is kept, to
	// explain its failure.
	childTail = 4 << 10
)

// The lines of the exchange.
var (
	childServesRE  = regexp.MustCompile(`^homa: \S+ server on (\S+)$`)
	childCPURE     = regexp.MustCompile(`^homa: cpu ns (\d+)$`)
	childStatsRE   = regexp.MustCompile(`^homa: stats (.*)$`)
	childStoppedRE = regexp.MustCompile(`^homa: \S+ server stopped after (\d+) requests$`)
)

// cpuCommand is the line that asks a child for its CPU time, and
// statsCommand the one that asks for its Homa socket's counters.
const (
	cpuCommand   = "cpu"
	statsCommand = "stats"
)

// AnswerParent is the child's side of the exchange, for the program
// that serves a run as "serve --parent" once it has said where it
// serves: it answers the parent's queries on in, on out, until in ends;
// then it calls stop. srv is the server it runs (its Homa socket's
// counters answer a stats query).
func AnswerParent(in io.Reader, out io.Writer, srv Server, stop func()) {
	defer stop()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch line := strings.TrimSpace(sc.Text()); line {
		case cpuCommand:
			fmt.Fprintf(out, "homa: cpu ns %d\n", cpuTime().Nanoseconds())
		case statsCommand:
			b, err := json.Marshal(serverStats(ServerSocket(srv))) // "null" without a Homa socket
			if err != nil {
				b = []byte("null")
			}
			fmt.Fprintf(out, "homa: stats %s\n", b)
		default:
			fmt.Fprintf(out, "homa: unknown query %q\n", line)
		}
	}
}

// childServer is a server running in a child process.
type childServer struct {
	name  string
	cmd   *exec.Cmd
	pid   int
	where netip.AddrPort
	stdin *os.File      // the write end of the child's standard input
	lines chan string   // its standard output, line by line; closed at EOF
	tail  *tailBuffer   // the end of its standard error
	exit  chan struct{} // closed once the process has been reaped
	err   error         // of Wait; read after exit

	mu       sync.Mutex // serializes queries
	served   uint64     // from its last line
	stopOnce sync.Once
	stopErr  error
	wg       sync.WaitGroup // the reader and the waiter
}

// startChild starts "homa serve --proto p" in a child process on a free
// port of cfg.Host, with the run's reply size and engine settings, and
// waits until it serves.
func startChild(ctx context.Context, p Protocol, cfg *Config) (_ *childServer, err error) {
	exe, err := cfg.executable()
	if err != nil {
		return nil, fmt.Errorf("server process: finding this program: %w", err)
	}
	args := []string{"serve", "--parent", "--proto", p.name, "--addr", netip.AddrPortFrom(cfg.Host, 0).String()}
	if cfg.ReplySize > 0 {
		args = append(args, "--reply-size", strconv.Itoa(cfg.ReplySize))
	}
	if cfg.Engine.LinkMbps > 0 {
		args = append(args, "--link-mbps", strconv.Itoa(cfg.Engine.LinkMbps))
	}
	if cfg.Engine.UnschedBytes > 0 {
		args = append(args, "--unsched-bytes", strconv.Itoa(cfg.Engine.UnschedBytes))
	}
	if cfg.Engine.PollDuration != 0 {
		args = append(args, "--poll", cfg.Engine.PollDuration.String())
	}
	if name := PollingName(cfg.Engine.Polling); name != "adaptive" {
		args = append(args, "--polling", name)
	}
	if cfg.Engine.PeerTimeout > 0 {
		args = append(args, "--peer-timeout", cfg.Engine.PeerTimeout.String())
	}
	c := &childServer{name: p.name, lines: make(chan string, 16), tail: &tailBuffer{max: childTail}, exit: make(chan struct{})}
	c.cmd = exec.Command(exe, args...)
	c.cmd.SysProcAttr = childProcAttr()
	c.cmd.Stderr = c.tail
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, errors.Join(err, inR.Close(), inW.Close())
	}
	c.cmd.Stdin, c.cmd.Stdout, c.stdin = inR, outW, inW
	started := make(chan error, 1)
	// The goroutine that starts the child keeps its thread until the
	// child is reaped: on Linux the child is killed when that thread
	// ends (Pdeathsig).
	c.wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := onCPUs(cfg.split.server, c.cmd.Start)
		started <- err
		if err == nil {
			c.err = c.cmd.Wait()
		}
		close(c.exit)
	})
	err = <-started
	// The child has its own ends of the pipes now (or failed to start).
	inR.Close()
	outW.Close()
	if err != nil {
		c.wg.Wait()
		return nil, errors.Join(fmt.Errorf("server process: %w", err), inW.Close(), outR.Close())
	}
	c.pid = c.cmd.Process.Pid
	if cfg.ChildStarted != nil {
		cfg.ChildStarted(c.pid)
	}
	c.wg.Go(func() { c.read(outR) })
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	line, err := c.next(ctx, childStartTimeout)
	if err != nil {
		return nil, fmt.Errorf("server process %d (homa %s): %w", c.pid, strings.Join(args, " "), err)
	}
	m := childServesRE.FindStringSubmatch(line)
	if m == nil {
		return nil, fmt.Errorf("server process %d: it said %q, not where it serves", c.pid, line)
	}
	if c.where, err = netip.ParseAddrPort(m[1]); err != nil {
		return nil, fmt.Errorf("server process %d: address %q: %w", c.pid, m[1], err)
	}
	return c, nil
}

// read passes the child's standard output on, line by line, until EOF.
func (c *childServer) read(r *os.File) {
	defer close(c.lines)
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		c.lines <- sc.Text()
	}
}

// next returns the child's next line of output, waiting at most d (and
// not after ctx's end). A child that exits first is an error that
// quotes the end of its standard error.
func (c *childServer) next(ctx context.Context, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case line, ok := <-c.lines:
		if ok {
			return line, nil
		}
		<-c.exit
		return "", c.exitError()
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", d)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// exitError says how the child ended, with the end of its standard
// error; the child has been reaped.
func (c *childServer) exitError() error {
	msg := strings.TrimSpace(c.tail.String())
	if c.err == nil {
		c.err = errors.New("exited")
	}
	if msg == "" {
		return fmt.Errorf("server process: %w", c.err)
	}
	return fmt.Errorf("server process: %w: %s", c.err, msg)
}

func (c *childServer) Addr() netip.AddrPort { return c.where }

// requests is the count of requests the child said it served when it
// stopped (0 before).
func (c *childServer) Requests() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served
}

// cpu asks the child for the user and system CPU time it has used.
func (c *childServer) cpu() (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, cpuCommand+"\n"); err != nil {
		return 0, fmt.Errorf("server process %d: asking its CPU time: %w", c.pid, err)
	}
	line, err := c.next(context.Background(), childReplyTimeout)
	if err != nil {
		return 0, fmt.Errorf("server process %d: asking its CPU time: %w", c.pid, err)
	}
	m := childCPURE.FindStringSubmatch(line)
	if m == nil {
		return 0, fmt.Errorf("server process %d: it answered %q to %q", c.pid, line, cpuCommand)
	}
	ns, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("server process %d: CPU time %q: %w", c.pid, m[1], err)
	}
	return time.Duration(ns), nil
}

// stats asks the child for its Homa socket's counters (nil when it has
// no Homa socket).
func (c *childServer) stats() (*SocketStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, statsCommand+"\n"); err != nil {
		return nil, fmt.Errorf("server process %d: asking its counters: %w", c.pid, err)
	}
	line, err := c.next(context.Background(), childReplyTimeout)
	if err != nil {
		return nil, fmt.Errorf("server process %d: asking its counters: %w", c.pid, err)
	}
	m := childStatsRE.FindStringSubmatch(line)
	if m == nil {
		return nil, fmt.Errorf("server process %d: it answered %q to %q", c.pid, line, statsCommand)
	}
	var s *SocketStats
	if err := json.Unmarshal([]byte(m[1]), &s); err != nil {
		return nil, fmt.Errorf("server process %d: counters %q: %w", c.pid, m[1], err)
	}
	return s, nil
}

// close stops the child: it closes its standard input, waits for it to
// exit (killing it after childStopGrace), reads what it said last and
// waits for the goroutines. A child that did not exit cleanly is an
// error. close is idempotent.
func (c *childServer) Close() error {
	c.stopOnce.Do(func() {
		c.stdin.Close()
		killed := false
		select {
		case <-c.exit:
		case <-time.After(childStopGrace):
			killed = c.cmd.Process.Kill() == nil
			<-c.exit
		}
		for line := range c.lines {
			if m := childStoppedRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				c.mu.Lock()
				c.served = n
				c.mu.Unlock()
			}
		}
		c.wg.Wait()
		switch {
		case killed:
			c.stopErr = fmt.Errorf("server process %d did not stop within %v of its input closing; killed", c.pid, childStopGrace)
		case c.err != nil:
			c.stopErr = fmt.Errorf("server process %d: %w", c.pid, c.exitError())
		}
	})
	return c.stopErr
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
