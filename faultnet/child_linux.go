//go:build linux

package faultnet

// Code runs inside a namespace as a separate process: the current binary
// re-executed under "ip netns exec NS", with roleEnv naming what it is to
// do. The alternative, runtime.LockOSThread plus setns(2) on one thread,
// moves only that thread: the Homa engine starts goroutines that run on
// other threads, and any socket one of them opens later (the route MTU
// probe in homa/netio, for one) would land in the caller's namespace.
// A process is also what the fault tests need to kill: SIGKILL closes its
// raw sockets and frees its Homa port leases exactly as a crash does.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// roleEnv names the role of a child process started by Start.
const roleEnv = "FAULTNET_ROLE"

// maxLine bounds one line a child writes on stdout.
const maxLine = 1 << 20

// A Role is the body of a child process. It gets the arguments given to
// Start, reads commands from os.Stdin and writes lines to os.Stdout, and
// returns the exit code. It should return when stdin closes.
type Role func(args []string) int

// ChildMain runs the role this process was started for and exits; in a
// process not started by Start it returns at once. Call it first in
// TestMain.
func ChildMain(roles map[string]Role) {
	name, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	role := roles[name]
	if role == nil {
		fmt.Fprintf(os.Stderr, "faultnet: no role %q\n", name)
		os.Exit(2)
	}
	os.Exit(role(os.Args[1:]))
}

// Child is a process started by Start.
type Child struct {
	Role  string
	NS    *NS
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // stdout, a line at a time; closed at EOF
	done  chan struct{} // closed once the process is reaped
	err   error         // of Wait; read after done
	tail  tailBuffer    // the end of stderr
}

// Start runs the current executable in ns with role as its role and args
// as its arguments. The child is killed if this process dies.
func (ns *NS) Start(role string, args ...string) (*Child, error) {
	// "ip netns exec" execs the command in place, so the child's pid is
	// the one to kill. /proc/self/exe would name ip itself by then, hence
	// os.Executable.
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &Child{Role: role, NS: ns, lines: make(chan string, 1024), done: make(chan struct{})}
	c.cmd = exec.Command("ip", append([]string{"netns", "exec", ns.Name, exe}, args...)...)
	c.cmd.Env = append(os.Environ(), roleEnv+"="+role)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Stderr = &c.tail
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go c.read(stdout)
	return c, nil
}

// read passes stdout on line by line, then reaps the process.
func (c *Child) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		c.lines <- sc.Text()
	}
	io.Copy(io.Discard, stdout) // after an over-long line
	close(c.lines)
	c.err = c.cmd.Wait()
	close(c.done)
}

// Send writes one command line to the child's stdin.
func (c *Child) Send(format string, a ...any) error {
	_, err := fmt.Fprintf(c.stdin, format+"\n", a...)
	return err
}

// Next returns the child's next line of output, waiting at most timeout.
func (c *Child) Next(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			<-c.done
			return "", fmt.Errorf("%s in %s exited (%v); stderr:\n%s", c.Role, c.NS.Name, c.err, c.Stderr())
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("%s in %s: no output for %v; stderr:\n%s", c.Role, c.NS.Name, timeout, c.Stderr())
	}
}

// Kill kills the child with SIGKILL and waits until it is gone.
func (c *Child) Kill() error {
	err := c.cmd.Process.Kill()
	<-c.done
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Stop closes the child's stdin, which asks it to end, and kills it if it
// has not ended within grace. It returns the process's exit error.
func (c *Child) Stop(grace time.Duration) error {
	c.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.Kill()
	}
	return c.err
}

// Exited is closed when the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.done }

// Stderr returns the end of what the child wrote on stderr.
func (c *Child) Stderr() string { return c.tail.String() }

// StartChild is Start for a test: it fails tb on error, and when tb ends
// stops the child (logging its stderr if tb failed). Call it after Setup,
// so that the child is gone before its namespace is deleted.
func StartChild(tb testing.TB, ns *NS, role string, args ...string) *Child {
	tb.Helper()
	c, err := ns.Start(role, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Stop(2 * time.Second)
		if tb.Failed() {
			if s := c.Stderr(); s != "" {
				tb.Logf("stderr of %s in %s:\n%s", role, ns.Name, s)
			}
		}
	})
	return c
}

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 16 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - tailSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
