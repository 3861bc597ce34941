package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/internal/tools/netns"
	"github.com/homa-go/homa/internal/tools/syscmd"
)

const (
	// Prefix starts the name of every namespace a Lab makes:
	// "homalab-<pid>-<n>-h<i>" and "homalab-<pid>-<n>-sw", so that labs
	// of parallel runs never collide and those left by a dead run can be
	// recognised (Cleanup).
	Prefix = "homalab-"
	// HostDev is the interface of a host, in its namespace.
	HostDev = "eth0"
	// Bridge is the bridge in the switch namespace.
	Bridge = "br0"
	// MaxHosts bounds Config.Hosts.
	MaxHosts = 64
)

// Subnet holds the hosts' addresses: host i is 10.147.0.<i>. It exists
// only inside the lab's namespaces.
var Subnet = netip.MustParsePrefix("10.147.0.0/24")

// Config describes a Lab.
type Config struct {
	// Hosts is the number of hosts, 2..MaxHosts.
	Hosts int
	// Link is the queueing of every host's downlink.
	Link Link
	// Rates overrides Link.Rate for some hosts, by host number (1..Hosts).
	Rates map[int]Rate
}

// Host is one host of a Lab.
type Host struct {
	Index int        // 1..Hosts
	NS    string     // namespace, as "ip netns" knows it
	Addr  netip.Addr // address of HostDev
	Port  string     // the switch's interface facing this host, "p<i>"
	Link  Link       // the queueing on Port's egress: this host's downlink
}

// Lab is a set of hosts joined through a switch, each in its own network
// namespace. Close tears it down.
type Lab struct {
	Name   string  // the prefix of its namespaces' names
	Switch string  // the switch namespace
	Hosts  []*Host // Hosts[i-1] is host i

	mu     sync.Mutex
	procs  map[*Proc]struct{} // started and not yet reaped
	closed bool

	logMu sync.Mutex // serializes Command.Log writes
}

// ConfigError is a Config New refuses.
type ConfigError struct{ Reason string }

func (e *ConfigError) Error() string { return "lab: " + e.Reason }

// Check reports what is wrong with c, as a *ConfigError, or nil.
func (c *Config) Check() error {
	if c.Hosts < 2 || c.Hosts > MaxHosts {
		return &ConfigError{fmt.Sprintf("%d hosts, want 2..%d", c.Hosts, MaxHosts)}
	}
	for i := range c.Rates {
		if i < 1 || i > c.Hosts {
			return &ConfigError{fmt.Sprintf("rate for host %d, which does not exist", i)}
		}
	}
	for i := 1; i <= c.Hosts; i++ {
		if err := c.link(i).check(); err != nil {
			return &ConfigError{fmt.Sprintf("host %d: %v", i, strings.TrimPrefix(err.Error(), "lab: "))}
		}
	}
	return nil
}

// link is the downlink of host i.
func (c *Config) link(i int) Link {
	l := c.Link
	if r, ok := c.Rates[i]; ok {
		l.Rate = r
	}
	return l
}

// ErrUnavailable is wrapped by Available's error when labs cannot be
// made for a reason of the host (a missing command or privilege), not a
// fault.
var ErrUnavailable = netns.ErrUnavailable

// Available reports what this host lacks to make a Lab, or nil if it
// lacks nothing: Linux, the ip and tc commands, the privilege to make
// namespaces (netns.Available). Any other failure is New's to report, so
// that a test that skips on Available's error never skips over a defect.
func Available() error {
	if err := platformOK(); err != nil {
		return err
	}
	if err := netns.Available(Prefix); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("lab: %w: the tc command (iproute2) is not installed: %w", ErrUnavailable, err)
	}
	return nil
}

// New builds a Lab. If it fails, or ctx ends while it builds, it deletes
// whatever it made.
func New(ctx context.Context, cfg Config) (*Lab, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	name := netns.Name(Prefix)
	l := &Lab{Name: name, Switch: name + "-sw", procs: make(map[*Proc]struct{})}
	for i := 1; i <= cfg.Hosts; i++ {
		l.Hosts = append(l.Hosts, &Host{
			Index: i,
			NS:    fmt.Sprintf("%s-h%d", name, i),
			Addr:  hostAddr(i),
			Port:  fmt.Sprintf("p%d", i),
			Link:  cfg.link(i),
		})
	}
	if err := l.build(ctx); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

// hostAddr is the address of host i.
func hostAddr(i int) netip.Addr {
	a := Subnet.Addr().As4()
	a[3] = byte(i)
	return netip.AddrFrom4(a)
}

// build runs the commands that make the namespaces, links and queues.
func (l *Lab) build(ctx context.Context) error {
	steps := [][]string{
		{"ip", "netns", "add", l.Switch},
		{"ip", "-n", l.Switch, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", l.Switch, "link", "set", "lo", "up"},
		{"ip", "-n", l.Switch, "link", "set", Bridge, "up"},
	}
	for _, h := range l.Hosts {
		mtu := strconv.Itoa(h.Link.mtu())
		steps = append(steps,
			[]string{"ip", "netns", "add", h.NS},
			// Both ends are made inside the namespaces, never in ours.
			[]string{"ip", "-n", l.Switch, "link", "add", h.Port, "mtu", mtu, "type", "veth",
				"peer", "name", HostDev, "mtu", mtu, "netns", h.NS},
			[]string{"ip", "-n", l.Switch, "link", "set", h.Port, "master", Bridge, "up"},
			[]string{"ip", "-n", h.NS, "addr", "add", netip.PrefixFrom(h.Addr, Subnet.Bits()).String(), "dev", HostDev},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", h.NS, "link", "set", HostDev, "up"})
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := run("", s...); err != nil {
			return err
		}
		if s[1] == "netns" && s[2] == "add" {
			noIPv6(s[3])
		}
	}
	for _, h := range l.Hosts {
		if err := ctx.Err(); err != nil {
			return err
		}
		script := strings.Join(tcScript(h.Port, h.Link, &netio.DefaultDSCP), "\n") + "\n"
		if _, err := run(script, "tc", "-n", l.Switch, "-batch", "-"); err != nil {
			return err
		}
	}
	return nil
}

// noIPv6 turns IPv6 off in namespace ns, before its interfaces exist:
// the lab is IPv4 only, and the neighbour discovery and multicast
// listener reports IPv6 sends by itself would otherwise pass through
// the queues. A kernel without IPv6 has nothing to turn off.
func noIPv6(ns string) {
	run("", "ip", "netns", "exec", ns, "sh", "-c",
		"echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6 && echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6")
}

// Namespaces lists the names of the lab's namespaces: the hosts', then
// the switch's.
func (l *Lab) Namespaces() []string {
	var names []string
	for _, h := range l.Hosts {
		names = append(names, h.NS)
	}
	return append(names, l.Switch)
}

// Host returns host i (1..len(Hosts)), or nil.
func (l *Lab) Host(i int) *Host {
	if i < 1 || i > len(l.Hosts) {
		return nil
	}
	return l.Hosts[i-1]
}

// Exec runs a short command (ip, tc, sysctl...) in the namespace of h and
// returns its output.
func (l *Lab) Exec(h *Host, args ...string) (string, error) {
	return run("", append([]string{"ip", "netns", "exec", h.NS}, args...)...)
}

// QueueStats returns the "tc -s" statistics of h's downlink: its qdiscs
// and classes, as tc prints them.
func (l *Lab) QueueStats(h *Host) (string, error) {
	q, err := run("", "tc", "-n", l.Switch, "-s", "qdisc", "show", "dev", h.Port)
	if err != nil {
		return "", err
	}
	c, err := run("", "tc", "-n", l.Switch, "-s", "class", "show", "dev", h.Port)
	return q + c, err
}

// PortDrops returns how many packets the switch has dropped at h's
// downlink since the lab was made: the drop counter of the port's root
// qdisc, which counts the drops of the queues below it.
func (l *Lab) PortDrops(h *Host) (uint64, error) {
	out, err := run("", "tc", "-n", l.Switch, "-s", "qdisc", "show", "dev", h.Port)
	if err != nil {
		return 0, err
	}
	return rootDrops(out)
}

// rootDrops reads the drop counter of the root qdisc (the tbf) from the
// output of "tc -s qdisc show".
func rootDrops(out string) (uint64, error) {
	head := fmt.Sprintf("qdisc tbf %x: root", tbfHandle)
	i := strings.Index(out, head)
	if i < 0 {
		return 0, fmt.Errorf("lab: no %q in tc output %q", head, out)
	}
	_, rest, ok := strings.Cut(out[i:], "(dropped ")
	num, _, _ := strings.Cut(rest, ",")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("lab: no drop counter in tc output %q", out)
	}
	return n, nil
}

// SocketDrops returns how many packets the raw and UDP sockets open in
// h have dropped because their receive buffers were full: the sum of
// the "drops" column of /proc/net/raw and /proc/net/udp there.
func (l *Lab) SocketDrops(h *Host) (uint64, error) {
	var total uint64
	for _, f := range []string{"/proc/net/raw", "/proc/net/udp"} {
		out, err := l.Exec(h, "cat", f)
		if err != nil {
			return 0, err
		}
		n, err := procNetDrops(out)
		if err != nil {
			return 0, fmt.Errorf("lab: %s in h%d: %w", f, h.Index, err)
		}
		total += n
	}
	return total, nil
}

// procNetDrops sums the last column, "drops", of a /proc/net/raw or
// /proc/net/udp table.
func procNetDrops(table string) (uint64, error) {
	var total uint64
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue // the header
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad drops column in %q", line)
		}
		total += n
	}
	return total, nil
}

// Close stops every process started in the lab (SIGTERM, then SIGKILL
// after a grace period) and deletes its namespaces, which deletes the
// veths and the bridge with them. It may be called more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	l.closed = true
	procs := make([]*Proc, 0, len(l.procs))
	for p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.Stop(stopGrace) })
	}
	wg.Wait()
	var errs []error
	for _, ns := range l.Namespaces() {
		if err := deleteNS(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteNS deletes a namespace; one that does not exist is not an error.
func deleteNS(name string) error { return netns.Delete(name) }

// ListNamespaces returns the names of the namespaces that start with
// Prefix: those of live labs and the leftovers of dead ones.
func ListNamespaces() ([]string, error) { return netns.List(Prefix) }

// Stale lists the namespaces of labs whose process no longer exists:
// runs that were killed, or that were asked to keep their lab. Labs of
// live processes, this one included, are not stale.
func Stale() ([]string, error) { return netns.Stale(Prefix) }

// Cleanup deletes the Stale namespaces and returns their names.
func Cleanup() ([]string, error) {
	stale, err := Stale()
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for _, name := range stale {
		if err := deleteNS(name); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, name)
	}
	return deleted, errors.Join(errs...)
}

// run runs a system command (see syscmd.Run).
func run(stdin string, args ...string) (string, error) { return syscmd.Run(stdin, args...) }
