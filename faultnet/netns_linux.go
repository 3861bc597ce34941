//go:build linux

package faultnet

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/homa-go/homa/internal/tools/netns"
	"github.com/homa-go/homa/internal/tools/syscmd"
)

const (
	// Dev is the veth interface's name inside each namespace.
	Dev = netns.Dev
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

// NS is one network namespace.
type NS struct {
	Name string     // as "ip netns" knows it
	Addr netip.Addr // address of Dev
}

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	A, B *NS
	p    *netns.Pair
}

// runInput runs the command args with stdin, in a bounded time, and
// returns its output, or an error quoting the command and what it printed.
func runInput(stdin string, args ...string) (string, error) { return syscmd.Run(stdin, args...) }

// Exec runs the command args inside the namespace and returns its output.
func (ns *NS) Exec(args ...string) (string, error) { return netns.Exec(ns.Name, args...) }

// Available reports why namespaces cannot be made here, or nil if they
// can: it looks for the ip command and makes and deletes a namespace.
func Available() error { return netns.Available(namePrefix) }

// NewPair makes two namespaces joined by a veth pair, with lo and veth0
// up in each. Close deletes them. It first deletes namespaces left behind
// by runs whose process is gone.
func NewPair() (*Pair, error) {
	p, err := netns.NewPair(netns.PairConfig{Prefix: namePrefix, A4: AddrA, B4: AddrB})
	if err != nil {
		return nil, err
	}
	return &Pair{A: &NS{Name: p.A.NS, Addr: AddrA}, B: &NS{Name: p.B.NS, Addr: AddrB}, p: p}, nil
}

// Close deletes both namespaces, which deletes the veth pair with them.
// Processes still inside keep a namespace alive until they exit, so stop
// them first.
func (p *Pair) Close() error { return p.p.Close() }

// Setup makes a Pair for a test or benchmark and deletes it when tb ends.
// It skips tb, saying why, where namespaces cannot be made.
func Setup(tb testing.TB) *Pair {
	tb.Helper()
	if err := Available(); errors.Is(err, netns.ErrUnavailable) {
		tb.Skipf("skipping: %v", err)
	} else if err != nil {
		tb.Fatal(err)
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
