//go:build linux

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireLab skips t, saying why, where labs cannot be made for want of
// a command or privilege, and fails it on any other error.
func requireLab(t testing.TB) {
	t.Helper()
	if err := Available(); errors.Is(err, ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

// newLab makes a Lab for a test and closes it when the test ends,
// checking that none of its namespaces is left. It skips the test, saying
// why, where labs cannot be made.
func newLab(t testing.TB, cfg Config) *Lab {
	t.Helper()
	requireLab(t)
	l, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		checkGone(t, l)
	})
	return l
}

// checkGone fails t if a namespace of l still exists.
func checkGone(t testing.TB, l *Lab) {
	t.Helper()
	names, err := ListNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, l.Name+"-") {
			t.Errorf("namespace %s is left after Close", n)
		}
	}
}

// inNS runs f on an OS thread that has joined the network namespace ns.
// Sockets f opens stay in ns for their whole life, whichever goroutine
// uses them later. The thread is never returned to the Go scheduler: it
// ends with the goroutine, because it is locked and in another namespace.
func inNS(ns string, f func() error) error {
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
		errc <- f()
	}()
	return <-errc
}

// listenUDP opens a UDP socket on h's address.
func listenUDP(t *testing.T, h *Host) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := inNS(h.NS, func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: h.Addr.AsSlice()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var fastLink = Link{Rate: 1e9, Buffer: DefaultBuffer}

// TestTopology builds a lab of three hosts and checks that each host can
// reach every other one through the switch (a UDP echo each way, the
// switch port counters moving), and nothing else.
func TestTopology(t *testing.T) {
	jumbo := fastLink
	jumbo.MTU = 9000
	l := newLab(t, Config{Hosts: 3, Link: jumbo})
	if len(l.Hosts) != 3 || l.Host(3).Addr.String() != "10.147.0.3" || l.Host(4) != nil {
		t.Fatalf("hosts %+v", l.Hosts)
	}
	for _, h := range l.Hosts {
		out, err := l.Exec(h, "ip", "-4", "-o", "addr", "show", "dev", HostDev)
		if err != nil || !strings.Contains(out, h.Addr.String()+"/24") {
			t.Errorf("h%d: %s has %q (%v)", h.Index, HostDev, out, err)
		}
		if out, err := l.Exec(h, "ip", "-6", "-o", "addr", "show"); err != nil || out != "" {
			t.Errorf("h%d has IPv6 addresses: %q (%v)", h.Index, out, err)
		}
		for _, c := range [][]string{
			{"ip", "-n", h.NS, "link", "show", HostDev},
			{"ip", "-n", l.Switch, "link", "show", h.Port},
		} {
			if out, err := run("", c...); err != nil || !strings.Contains(out, " mtu 9000 ") {
				t.Errorf("%v: %q (%v), want mtu 9000", c, out, err)
			}
		}
	}
	socks := make([]*net.UDPConn, len(l.Hosts))
	for i, h := range l.Hosts {
		socks[i] = listenUDP(t, h)
	}
	for i, from := range socks {
		for j, to := range socks {
			if i == j {
				continue
			}
			msg := fmt.Sprintf("h%d->h%d", i+1, j+1)
			if err := exchange(from, to, msg); err != nil {
				t.Error(err)
			}
		}
	}
	// Every port carried packets to its host: the traffic crossed sw.
	for _, h := range l.Hosts {
		stats, err := l.QueueStats(h)
		if err != nil {
			t.Fatal(err)
		}
		if sentPackets(t, stats, "qdisc tbf") == 0 {
			t.Errorf("port of h%d sent nothing:\n%s", h.Index, stats)
		}
	}
	// The host cannot reach anything outside the lab.
	if out, err := l.Exec(l.Host(1), "ip", "-4", "route", "get", "8.8.8.8"); err == nil {
		t.Errorf("h1 has a route out of the lab: %s", out)
	}
}

// exchange sends msg from a to b and expects it back.
func exchange(a, b *net.UDPConn, msg string) error {
	deadline := time.Now().Add(5 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	if _, err := a.WriteToUDP([]byte(msg), b.LocalAddr().(*net.UDPAddr)); err != nil {
		return err
	}
	buf := make([]byte, 100)
	n, from, err := b.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != msg {
		return fmt.Errorf("%s: got %q, %v", msg, buf[:n], err)
	}
	if _, err := b.WriteToUDP(buf[:n], from); err != nil {
		return err
	}
	n, _, err = a.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != msg {
		return fmt.Errorf("%s back: got %q, %v", msg, buf[:n], err)
	}
	return nil
}

// sentPackets reads "Sent N bytes M pkt" of the first qdisc or class of
// tc -s output whose line starts with head.
func sentPackets(t *testing.T, stats, head string) int {
	t.Helper()
	i := strings.Index(stats, head)
	if i < 0 {
		t.Fatalf("no %q in:\n%s", head, stats)
	}
	m := regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`).FindStringSubmatch(stats[i:])
	if m == nil {
		t.Fatalf("no counters after %q in:\n%s", head, stats)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestRateLimit sends 1 MB over TCP into a host whose downlink runs at
// 10 Mbit/s. The transfer cannot take less than 0.8 s if the limit
// works: the test asserts a lower bound only, at half of that, which a
// slow machine cannot break.
// transfer sends size bytes over TCP from host 2 to host 1 of l, through
// host 1's rate-limited downlink, and returns how long it took.
func transfer(tb testing.TB, l *Lab, size int) time.Duration {
	tb.Helper()
	h1, h2 := l.Host(1), l.Host(2)
	var ln net.Listener
	if err := inNS(h1.NS, func() (err error) { ln, err = net.Listen("tcp4", h1.Addr.String()+":0"); return }); err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if err == nil && n != int64(size) {
			err = fmt.Errorf("received %d bytes, want %d", n, size)
		}
		got <- err
	}()
	var c net.Conn
	if err := inNS(h2.NS, func() (err error) { c, err = net.Dial("tcp4", ln.Addr().String()); return }); err != nil {
		tb.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		tb.Fatal(err)
	}
	c.Close()
	if err := <-got; err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// TestRateLimit: a transfer into host 1 passes through its downlink's
// rate limiter, which holds packets back (its overlimits counter rises)
// and forwards them all. How fast the link runs is BenchmarkRateLimit's.
func TestRateLimit(t *testing.T) {
	const rate, size = 10e6, 1 << 20
	l := newLab(t, Config{Hosts: 2, Link: Link{Rate: rate, Buffer: DefaultBuffer}})
	transfer(t, l, size)
	stats, err := l.QueueStats(l.Host(1))
	if err != nil {
		t.Fatal(err)
	}
	// The root qdisc is the limiter: it carried the whole transfer, and
	// held most packets back for tokens (a sender on this host always
	// outruns 10 Mbit/s).
	m := regexp.MustCompile(`qdisc tbf 1: root .*rate 10Mbit.*\n\s*Sent (\d+) bytes (\d+) pkt \(dropped \d+, overlimits (\d+)`).FindStringSubmatch(stats)
	if m == nil {
		t.Fatalf("no 10 Mbit/s tbf at the root of the downlink:\n%s", stats)
	}
	sent, _ := strconv.Atoi(m[1])
	pkts, _ := strconv.Atoi(m[2])
	over, _ := strconv.Atoi(m[3])
	if sent < size {
		t.Errorf("the limiter sent %d bytes, fewer than the %d transferred", sent, size)
	}
	if over < pkts/2 {
		t.Errorf("the limiter held back %d times for %d packets; want at least half of them held:\n%s", over, pkts, stats)
	}
}

// BenchmarkRateLimit measures the rate a TCP transfer reaches through a
// 10 Mbit/s downlink (root; run with -benchtime 3x).
func BenchmarkRateLimit(b *testing.B) {
	const rate, size = 10e6, 1 << 20
	l := newLab(b, Config{Hosts: 2, Link: Link{Rate: rate, Buffer: DefaultBuffer}})
	var total time.Duration
	for b.Loop() {
		total += transfer(b, l, size)
	}
	b.ReportMetric(float64(size*8*b.N)/total.Seconds()/1e6, "Mbit/s")
}

// TestPriorityOvertakes queues a burst of low-priority UDP packets at a
// 10 Mbit/s downlink, then sends one packet marked with Homa priority 7's
// DSCP: it must leave the switch ahead of most of the burst, and the
// class counters must show each packet in its priority's queue.
func TestPriorityOvertakes(t *testing.T) {
	const burst, size = 100, 1400 // 140 KB: 112 ms at the link rate
	l := newLab(t, Config{Hosts: 2, Link: Link{Rate: 10e6, Buffer: DefaultBuffer}})
	h1, h2 := l.Host(1), l.Host(2)
	rx := listenUDP(t, h1)
	rx.SetReadBuffer(1 << 20)
	low, high := listenUDP(t, h2), listenUDP(t, h2)
	setTOS(t, high, 7<<5)
	dst := rx.LocalAddr().(*net.UDPAddr)
	pkt := make([]byte, size)
	for i := range burst {
		pkt[0] = byte(i)
		if _, err := low.WriteToUDP(pkt, dst); err != nil {
			t.Fatal(err)
		}
	}
	pkt[0] = 0xff
	if _, err := high.WriteToUDP(pkt[:100], dst); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	pos := -1
	for i := range burst + 1 {
		n, err := rx.Read(pkt)
		if err != nil {
			t.Fatalf("after %d packets: %v", i, err)
		}
		if n == 100 {
			pos = i
		}
	}
	if pos < 0 || pos >= burst/2 {
		t.Errorf("the priority-7 packet arrived at position %d of %d", pos, burst+1)
	}
	t.Logf("priority-7 packet arrived %dth of %d", pos+1, burst+1)
	stats, err := l.QueueStats(h1)
	if err != nil {
		t.Fatal(err)
	}
	// ARP lands in the top class, hence "at least".
	if n := sentPackets(t, stats, "class htb "+Class(7)+" "); n < 1 {
		t.Errorf("class of priority 7 sent %d packets, want at least 1:\n%s", n, stats)
	}
	if n := sentPackets(t, stats, "class htb "+Class(0)+" "); n < burst {
		t.Errorf("class of priority 0 sent %d packets, want at least %d:\n%s", n, burst, stats)
	}
}

// TestDrops overflows a 20 KB queue of a 10 Mbit/s downlink, and the
// receive buffer of a socket that is not read: both counters see it.
func TestDrops(t *testing.T) {
	const burst, size = 50, 1400 // 70 KB
	l := newLab(t, Config{Hosts: 2, Link: Link{Rate: 10e6, Buffer: 20000}})
	h1, h2 := l.Host(1), l.Host(2)
	rx := listenUDP(t, h1)
	rx.SetReadBuffer(1) // the kernel's minimum
	tx := listenUDP(t, h2)
	for range burst {
		if _, err := tx.WriteToUDP(make([]byte, size), rx.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	q, err := l.PortDrops(h1)
	if err != nil || q == 0 || q >= burst {
		t.Errorf("PortDrops = %d, %v; want some of %d", q, err, burst)
	}
	// What left the queue reaches the socket over the next 60 ms.
	deadline := time.Now().Add(5 * time.Second)
	var s uint64
	for s == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if s, err = l.SocketDrops(h1); err != nil {
			t.Fatal(err)
		}
	}
	if s == 0 {
		t.Error("SocketDrops stayed 0 with a full receive buffer")
	}
	if s2, err := l.SocketDrops(h2); err != nil || s2 != 0 {
		t.Errorf("SocketDrops(h2) = %d, %v; want 0", s2, err)
	}
	t.Logf("%d dropped at the port, %d by the socket", q, s)
}

// setTOS sets the IPv4 TOS byte of c's packets.
func setTOS(t *testing.T, c *net.UDPConn, tos int) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// TestProcesses runs programs in a host: the ready line is seen, output
// is kept and logged, a process that fails says how, and Close stops one
// that is still running before deleting the namespaces.
func TestProcesses(t *testing.T) {
	l := newLab(t, Config{Hosts: 2, Link: fastLink})
	var log bytes.Buffer
	p, err := l.Start(l.Host(1), Command{
		Args:  []string{"sh", "-c", "ip -4 -o addr show dev eth0; echo ready; exec sleep 60"},
		Ready: func(line string) bool { return line == "ready" },
		Log:   &log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := p.Output(); !strings.Contains(out, "10.147.0.1/24") {
		t.Errorf("the program did not run in h1: %q", out)
	}
	bad, err := l.Start(l.Host(2), Command{Args: []string{"sh", "-c", "echo oops >&2; exit 3"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Wait(ctx, 10*time.Second)
	var ee *ExitError
	var xe *exec.ExitError
	if !errors.As(err, &ee) || !errors.As(err, &xe) || xe.ExitCode() != 3 || !strings.Contains(ee.Output, "oops") {
		t.Errorf("failing program: %v", err)
	}
	// A ready line that never comes.
	slow, err := l.Start(l.Host(2), Command{Args: []string{"sleep", "60"}, Ready: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.WaitReady(ctx, 100*time.Millisecond); err == nil {
		t.Error("WaitReady returned nil for a program that printed nothing")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*Proc{p, slow} {
		select {
		case <-q.Exited():
		default:
			t.Errorf("%v still running after Close", q.Args)
		}
	}
	checkGone(t, l)
	if _, err := l.Start(l.Host(1), Command{Args: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	if !strings.Contains(log.String(), "[h1] ready\n") || !strings.Contains(log.String(), "[h2] oops\n") {
		t.Errorf("log:\n%s", log.String())
	}
}

// TestCancel cancels a wait on a running program: the program is stopped
// and the lab still tears down completely.
func TestCancel(t *testing.T) {
	l := newLab(t, Config{Hosts: 2, Link: fastLink})
	p, err := l.Start(l.Host(2), Command{Args: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := p.Wait(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait: %v, want context.Canceled", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("the program still runs after a cancelled Wait")
	}
	// New with a context that has ended leaves nothing behind.
	before, _ := ListNamespaces()
	if _, err := New(ctx, Config{Hosts: 2, Link: fastLink}); !errors.Is(err, context.Canceled) {
		t.Errorf("New with a cancelled context: %v", err)
	}
	if after, _ := ListNamespaces(); !slices.Equal(before, after) {
		t.Errorf("namespaces before %v, after %v", before, after)
	}
}

// TestCleanup deletes the namespaces of a dead process and keeps those of
// live ones.
func TestCleanup(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	left, err := Stale()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Skipf("skipping: Cleanup would delete the labs left by earlier runs, %v; homa lab --cleanup deletes them", left)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, Config{Hosts: 2, Link: fastLink})
	stale := fmt.Sprintf("%s%d-1-h1", Prefix, dead.Process.Pid)
	if _, err := run("", "ip", "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNS(stale) })
	if got, err := Stale(); err != nil || !slices.Equal(got, []string{stale}) {
		t.Errorf("Stale() = %v, %v; want [%s]", got, err, stale)
	}
	deleted, err := Cleanup()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(deleted, stale) {
		t.Errorf("Cleanup deleted %v, not %s", deleted, stale)
	}
	names, _ := ListNamespaces()
	for _, ns := range l.Namespaces() {
		if !slices.Contains(names, ns) {
			t.Errorf("Cleanup deleted %s of a live lab", ns)
		}
	}
	if slices.Contains(names, stale) {
		t.Errorf("%s still exists", stale)
	}
}
