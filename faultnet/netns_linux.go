//go:build linux

package faultnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/homa-go/homa/internal/syscmd"
)

const (
	// Dev is the veth interface's name inside each namespace.
	Dev = "veth0"
	// namePrefix starts the name of every namespace made here:
	// "hfn-<pid>-<n>-a" and "-b", so that parallel runs never collide and
	// namespaces left by a dead run can be recognised and deleted.
	namePrefix = "hfn-"
)

// The addresses of the two ends. They exist only inside the namespaces.
var (
	AddrA = netip.MustParseAddr("10.146.0.1")
	AddrB = netip.MustParseAddr("10.146.0.2")
)

const prefixLen = 24

// NS is one network namespace.
type NS struct {
	Name string     // as "ip netns" knows it
	Addr netip.Addr // address of Dev
}

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	A, B *NS
}

var pairSeq atomic.Int32

// run runs the command args with a bounded time and returns its output,
// or an error quoting the command and what it printed.
func run(args ...string) (string, error) { return runInput("", args...) }

// runInput is run with stdin for the command.
func runInput(stdin string, args ...string) (string, error) { return syscmd.Run(stdin, args...) }

// Exec runs the command args inside the namespace and returns its output.
func (ns *NS) Exec(args ...string) (string, error) {
	return run(append([]string{"ip", "netns", "exec", ns.Name}, args...)...)
}

// Available reports why namespaces cannot be made here, or nil if they
// can: it looks for the ip command and makes and deletes a namespace.
func Available() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("the ip command (iproute2) is not installed: %w", err)
	}
	name := fmt.Sprintf("%s%d-probe", namePrefix, os.Getpid())
	if _, err := run("ip", "netns", "add", name); err != nil {
		return fmt.Errorf("cannot create network namespaces (needs root): %w", err)
	}
	_, err := run("ip", "netns", "del", name)
	return err
}

// NewPair makes two namespaces joined by a veth pair, with lo and veth0
// up in each. Close deletes them. It first deletes namespaces left behind
// by runs whose process is gone.
func NewPair() (*Pair, error) {
	sweepStale()
	base := fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), pairSeq.Add(1))
	p := &Pair{A: &NS{Name: base + "a", Addr: AddrA}, B: &NS{Name: base + "b", Addr: AddrB}}
	steps := [][]string{
		{"ip", "netns", "add", p.A.Name},
		{"ip", "netns", "add", p.B.Name},
		// Both ends are created inside the namespaces directly, never in
		// the caller's namespace.
		{"ip", "-n", p.A.Name, "link", "add", Dev, "type", "veth", "peer", "name", Dev, "netns", p.B.Name},
	}
	for _, ns := range []*NS{p.A, p.B} {
		steps = append(steps,
			[]string{"ip", "-n", ns.Name, "addr", "add", netip.PrefixFrom(ns.Addr, prefixLen).String(), "dev", Dev},
			[]string{"ip", "-n", ns.Name, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns.Name, "link", "set", Dev, "up"})
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close deletes both namespaces, which deletes the veth pair with them.
// Processes still inside keep a namespace alive until they exit, so stop
// them first.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range []*NS{p.A, p.B} {
		if _, err := run("ip", "netns", "del", ns.Name); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Setup makes a Pair for a test or benchmark and deletes it when tb ends.
// It skips tb, saying why, where namespaces cannot be made.
func Setup(tb testing.TB) *Pair {
	tb.Helper()
	if err := Available(); err != nil {
		tb.Skipf("skipping: %v", err)
	}
	p, err := NewPair()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Error(err)
		}
	})
	return p
}

// sweepStale deletes namespaces named by this package whose creating
// process no longer exists (a run killed before its cleanup).
func sweepStale() {
	out, err := run("ip", "netns", "list")
	if err != nil {
		return
	}
	for line := range strings.Lines(out) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, namePrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		run("ip", "netns", "del", name)
	}
}
