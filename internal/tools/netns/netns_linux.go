//go:build linux

package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/tools/syscmd"
)

// Sweep deletes the stale namespaces of prefix, quietly: it is
// housekeeping before a new namespace is made.
func Sweep(prefix string) {
	stale, _ := Stale(prefix)
	for _, name := range stale {
		Delete(name)
	}
}

// Do runs f on an OS thread that has joined namespace ns, and waits for
// it. Sockets f opens stay in ns for their whole life, whatever goroutine
// uses them later. The thread is never handed back to the Go scheduler:
// it ends with its goroutine, locked and in another namespace.
func Do(ns string, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		errc <- nil
	}()
	return <-errc
}

// Host is one end of a Pair.
type Host struct {
	NS     string     // the namespace, as "ip netns" knows it
	V4, V6 netip.Addr // the addresses of Dev
}

// Pair is two namespaces joined by a veth pair, Dev in each.
type Pair struct {
	A, B Host
}

// PairConfig says how to make a Pair.
type PairConfig struct {
	// Prefix starts the namespaces' names (see Name).
	Prefix string
	// A4 and B4 are the IPv4 addresses of the two ends, on one /24.
	A4, B4 netip.Addr
	// A6 and B6, when valid, are IPv6 addresses of the two ends, on one
	// /64, set up without duplicate address detection so that they
	// work at once.
	A6, B6 netip.Addr
	// MTU, when positive, is the veth link's.
	MTU int
	// Neighbours makes each end know the other's link address from the
	// start (neighbour discovery on a link just brought up may lose its
	// first probe) and gives up resolving any other address after three
	// probes 100 ms apart; it also lifts the rate limits on ICMP errors.
	Neighbours bool
}

// NewPair makes a Pair as cfg says, with lo and Dev up in each
// namespace. Close deletes it. It first deletes namespaces left behind
// by dead runs with the same prefix.
func NewPair(cfg PairConfig) (*Pair, error) {
	Sweep(cfg.Prefix)
	base := Name(cfg.Prefix)
	p := &Pair{A: Host{base + "-a", cfg.A4, cfg.A6}, B: Host{base + "-b", cfg.B4, cfg.B6}}
	link := []string{"ip", "-n", p.A.NS, "link", "add", Dev}
	if cfg.MTU > 0 {
		link = append(link, "mtu", strconv.Itoa(cfg.MTU))
	}
	// Both ends are made inside the namespaces, never in the caller's.
	link = append(link, "type", "veth", "peer", "name", Dev, "netns", p.B.NS)
	steps := [][]string{{"ip", "netns", "add", p.A.NS}, {"ip", "netns", "add", p.B.NS}, link}
	for _, h := range []Host{p.A, p.B} {
		steps = append(steps, []string{"ip", "-n", h.NS, "addr", "add", netip.PrefixFrom(h.V4, 24).String(), "dev", Dev})
		if h.V6.IsValid() {
			steps = append(steps, []string{"ip", "-n", h.NS, "addr", "add", netip.PrefixFrom(h.V6, 64).String(), "dev", Dev, "nodad"})
		}
		steps = append(steps,
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", h.NS, "link", "set", Dev, "up"})
		if cfg.Neighbours {
			steps = append(steps,
				[]string{"ip", "netns", "exec", h.NS, "sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"},
				[]string{"ip", "netns", "exec", h.NS, "sysctl", "-q", "-w",
					"net.ipv4.neigh." + Dev + ".retrans_time_ms=100", "net.ipv6.neigh." + Dev + ".retrans_time_ms=100"})
		}
	}
	for _, s := range steps {
		if _, err := syscmd.Run("", s...); err != nil {
			p.Close()
			return nil, err
		}
	}
	if cfg.Neighbours {
		if err := p.knowEachOther(); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// knowEachOther enters each end's link address in the other's neighbour
// table, for good.
func (p *Pair) knowEachOther() error {
	for _, h := range []struct{ self, peer Host }{{p.A, p.B}, {p.B, p.A}} {
		out, err := syscmd.Run("", "ip", "-n", h.peer.NS, "-br", "link", "show", Dev)
		f := strings.Fields(out)
		if err != nil || len(f) < 3 {
			return fmt.Errorf("link address of %s in %s: %q, %v", Dev, h.peer.NS, out, err)
		}
		for _, a := range []netip.Addr{h.peer.V4, h.peer.V6} {
			if !a.IsValid() {
				continue
			}
			if _, err := syscmd.Run("", "ip", "-n", h.self.NS, "neigh", "replace", a.String(), "lladdr", f[2], "dev", Dev, "nud", "permanent"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close deletes both namespaces, which deletes the veth pair with them.
// Processes still inside keep a namespace alive until they exit, so stop
// them first.
func (p *Pair) Close() error {
	return errors.Join(Delete(p.A.NS), Delete(p.B.NS))
}
