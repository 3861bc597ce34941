package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long Stop and Close wait after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// maxLine bounds one line of a child's output; longer lines are cut.
const maxLine = 64 << 10

// ErrClosed is returned by Start on a closed Lab.
var ErrClosed = errors.New("lab: closed")

// Command is a program to run in a host.
type Command struct {
	// Args is the program and its arguments.
	Args []string
	// Ready, if set, recognises the line of standard output that says
	// the program is ready (a server listening); see Proc.WaitReady.
	Ready func(line string) bool
	// Log, if set, gets every line the program writes on standard
	// output and standard error, prefixed with "[h<i>] ". The Lab
	// serializes the writes of all its processes.
	Log io.Writer
}

// Proc is a process running in a host of a Lab.
type Proc struct {
	Host *Host
	Args []string

	cmd       *exec.Cmd
	ready     chan struct{} // closed at the first line Ready accepts
	readyOnce sync.Once
	done      chan struct{} // closed once the process is reaped
	err       error         // of Wait; read after done
	out       tailBuffer    // the end of its output
	lab       *Lab
}

// Start runs c in host h under "ip netns exec". The process is killed if
// this one dies, and stopped by Close. Its output is kept (the end of it:
// Output) and passed on to c.Log.
func (l *Lab) Start(h *Host, c Command) (*Proc, error) {
	if len(c.Args) == 0 {
		return nil, errors.New("lab: Start with no program")
	}
	p := &Proc{Host: h, Args: c.Args, ready: make(chan struct{}), done: make(chan struct{}), lab: l}
	// "ip netns exec" execs the program in place: its pid is the one to
	// signal.
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", h.NS}, c.Args...)...)
	p.cmd.SysProcAttr = sysProcAttr()
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("lab: start %s in h%d: %w", c.Args[0], h.Index, err)
	}
	l.procs[p] = struct{}{}
	go p.reap(stdout, stderr, c)
	return p, nil
}

// reap copies the output until both pipes close, then waits for the
// process.
func (p *Proc) reap(stdout, stderr io.Reader, c Command) {
	logLine := func(line string) {
		p.out.WriteLine(line)
		if c.Log != nil {
			p.lab.logMu.Lock()
			fmt.Fprintf(c.Log, "[h%d] %s\n", p.Host.Index, line)
			p.lab.logMu.Unlock()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		scanLines(stdout, func(line string) {
			logLine(line)
			if c.Ready != nil && c.Ready(line) {
				p.readyOnce.Do(func() { close(p.ready) })
			}
		})
	})
	wg.Go(func() { scanLines(stderr, logLine) })
	wg.Wait()
	p.err = p.cmd.Wait()
	p.lab.mu.Lock()
	delete(p.lab.procs, p)
	p.lab.mu.Unlock()
	close(p.done)
}

// scanLines calls f with each line read from r until r ends.
func scanLines(r io.Reader, f func(string)) {
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			f(strings.TrimRight(string(line[:min(len(line), maxLine)]), "\r\n"))
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			// The rest of an over-long line.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return
			}
		default:
			return
		}
	}
}

// ExitError is a process that ended badly: its exit status and the end of
// its output (the message quotes the last few lines).
type ExitError struct {
	Host   int
	Args   []string
	Err    error
	Output string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("h%d: %s: %v; its last output:\n%s", e.Host, strings.Join(e.Args, " "), e.Err, lastLines(e.Output, errorLines))
}

func (e *ExitError) Unwrap() error { return e.Err }

// errorLines is how many lines of output an ExitError's message quotes.
const errorLines = 10

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// exitError wraps err, a failure of p, with p's output.
func (p *Proc) exitError(err error) error {
	return &ExitError{Host: p.Host.Index, Args: p.Args, Err: err, Output: p.Output()}
}

// WaitReady waits until the process prints the line Command.Ready
// accepts. It fails if the process exits first, ctx ends, or timeout
// passes.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return p.exitError(fmt.Errorf("exited before it was ready (%v)", p.err))
	case <-t.C:
		return p.exitError(fmt.Errorf("not ready after %v", timeout))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait waits for the process to exit and returns nil if it exited with
// status 0, or an *ExitError. If ctx ends or timeout passes first, it
// stops the process and says so.
func (p *Proc) Wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return p.exitError(p.err)
		}
		return nil
	case <-t.C:
		p.Stop(stopGrace)
		return p.exitError(fmt.Errorf("still running after %v", timeout))
	case <-ctx.Done():
		p.Stop(stopGrace)
		return ctx.Err()
	}
}

// Stop sends the process SIGTERM, then SIGKILL if it has not exited
// within grace, and waits until it is reaped. It returns the process's
// exit error (nil if it exited with status 0).
func (p *Proc) Stop(grace time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Exited is closed when the process has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Output returns the end of what the process wrote, standard output and
// standard error interleaved by line.
func (p *Proc) Output() string { return p.out.String() }

// tailBuffer keeps the last tailSize bytes of lines written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 16 << 10

// WriteLine appends line and a newline.
func (b *tailBuffer) WriteLine(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(append(b.buf, line...), '\n')
	if over := len(b.buf) - tailSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
