package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/sock"
)

// notHere is an address of no host's: TEST-NET-1 (RFC 5737). Binding to
// it fails; nothing is ever sent to it.
const notHere = "192.0.2.1"

// checkOneLine checks that a failure's stderr is one line that starts
// with the command's name, has no second "homa: ", and says want.
func checkOneLine(t *testing.T, args []string, code, wantCode int, stderr, want string) {
	t.Helper()
	first, _, _ := strings.Cut(stderr, "\n")
	switch {
	case code != wantCode:
		t.Errorf("%q: exit %d, want %d; stderr %q", args, code, wantCode, stderr)
	case !strings.HasPrefix(first, "homa "+args[0]+": "):
		t.Errorf("%q: stderr %q does not start with the command's name", args, stderr)
	case strings.Contains(strings.TrimPrefix(first, "homa "+args[0]+": "), "homa: "):
		t.Errorf("%q: %q repeats \"homa: \"", args, first)
	case !strings.Contains(first, want):
		t.Errorf("%q: %q does not say %q", args, first, want)
	case wantCode == 1 && strings.Count(stderr, "\n") != 1:
		t.Errorf("%q: stderr is not one line: %q", args, stderr)
	}
}

// TestAddressErrors: a bad address is named as the local or the remote
// one, with what is wrong with it.
func TestAddressErrors(t *testing.T) {
	port := freePort(t)
	taken, err := sock.Open(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), &sock.Config{Transport: sock.UDP})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	silent := freePort(t) // a Homa port no server holds
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedTCP := ln.Addr().String() // a TCP port nothing listens on
	ln.Close()

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--udp", "--addr", "127.0.0.1:40000"}, 2, "--addr 127.0.0.1:40000: port 40000 is not a Homa server port (1..32767; 0 picks a free one)"},
		{[]string{"serve", "--udp", "--addr", "127.0.0.1"}, 2, `--addr "127.0.0.1": address 127.0.0.1: missing port in address`},
		{[]string{"serve", "--udp", "--addr", notHere + ":4000"}, 1, "local address " + notHere + ":4000: not an address of this host"},
		{[]string{"serve", "--proto", "tcp", "--addr", notHere + ":0"}, 1, "local address " + notHere + ":0: not an address of this host"},
		{[]string{"serve", "--udp", "--addr", fmt.Sprintf("127.0.0.1:%d", port)}, 1,
			fmt.Sprintf("local address 127.0.0.1:%d: the port is in use by another socket on this host", port)},
		{[]string{"serve", "--udp", "--addr", "host.invalid:4000"}, 1, "local address host.invalid:4000: "},
		{[]string{"ping", "--udp", "--addr", "127.0.0.1:0"}, 2, "--addr 127.0.0.1:0: port 0 is not a Homa server port (1..32767)"},
		{[]string{"ping", "--udp", "--addr", "127.0.0.1:33000"}, 2, "port 33000 is not a Homa server port"},
		{[]string{"ping", "--udp", "--addr", "host.invalid:4000"}, 1, "remote address host.invalid:4000: "},
		{[]string{"ping", "--udp", "--count", "1", "--addr", fmt.Sprintf("127.0.0.1:%d", silent)}, 1,
			fmt.Sprintf("remote address 127.0.0.1:%d: nothing listens on that Homa port", silent)},
		{[]string{"bench", "--proto", "homa-udp", "--target", "host.invalid:4000"}, 1, "remote address host.invalid:4000: "},
		{[]string{"stat", "--url", "http://" + closedTCP + "/metrics"}, 1, "remote address http://" + closedTCP + "/metrics: connection refused"},
	} {
		code, stdout, stderr := runHoma(context.Background(), tc.args...)
		checkOneLine(t, tc.args, code, tc.code, stderr, tc.want)
		if strings.Contains(stderr, "destination") && strings.Contains(tc.want, "local") {
			t.Errorf("%q: a local address called a destination: %q", tc.args, stderr)
		}
		if tc.args[0] == "serve" && stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", tc.args, stdout)
		}
	}
}

// TestMessage: the transport's sentinels lose their "homa: " inside a
// line that already starts with "homa CMD: ", and a prefix naming the
// command is not repeated; other text stays as it is.
func TestMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"ping", fmt.Errorf("round trip 3: %w", sock.ErrPeerTimeout), "homa ping: round trip 3: " + strings.TrimPrefix(sock.ErrPeerTimeout.Error(), "homa: ")},
		{"serve", fmt.Errorf("%w: port 40000", sock.ErrBadAddress), "homa serve: " + strings.TrimPrefix(sock.ErrBadAddress.Error(), "homa: ") + ": port 40000"},
		{"lab", errors.New("lab: cannot create network namespaces"), "homa lab: cannot create network namespaces"},
		{"bench", errors.New("measuring homa: latency: timed out"), "homa bench: measuring homa: latency: timed out"},
	} {
		var b bytes.Buffer
		if code := fail(&b, tc.name, tc.err); code != 1 || b.String() != tc.want+"\n" {
			t.Errorf("fail(%s, %v): exit %d, %q; want 1, %q", tc.name, tc.err, code, b.String(), tc.want)
		}
	}
	// The errors the command builds still match what they wrap.
	if err := bench.RemoteError("h:1", sock.ErrPeerTimeout); !errors.Is(err, sock.ErrPeerTimeout) {
		t.Errorf("%v does not match ErrPeerTimeout", err)
	}
	if err := bench.OpenError("h:1", fmt.Errorf("open: %w", sock.ErrPermission)); !errors.Is(err, sock.ErrPermission) || !strings.Contains(err.Error(), "--udp") {
		t.Errorf("%v: want advice naming --udp, matching ErrPermission", err)
	}
}

// serverLine matches the line serve prints once it serves.
var serverLine = regexp.MustCompile(`^homa: (\S+) server on 127\.0\.0\.1:(\d+)`)

// serveInBackground runs "homa serve" with args until the test ends, and
// returns the port it says it serves on.
func serveInBackground(t *testing.T, args ...string) uint16 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := newWatchedBuffer(), newWatchedBuffer()
	done := make(chan int, 1)
	// running ends when serve returns, or after a bound.
	running, stopped := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopped()
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), out, errOut)
		stopped()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve %q: exit %d: %s", args, code, errOut.String())
		}
	})
	var m []string
	if !out.waitFor(running, func(s string) bool { m = serverLine.FindStringSubmatch(s); return m != nil }) {
		t.Fatalf("serve %q printed no address: stdout %q, stderr %q", args, out.String(), errOut.String())
	}
	p, err := strconv.ParseUint(m[2], 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(p)
}

// TestServeFreePort: port 0 makes serve pick a free server port and say
// which; a client reaches the server there.
func TestServeFreePort(t *testing.T) {
	cases := []struct {
		name  string
		flags []string
	}{{"homa-udp", []string{"--udp"}}, {"tcp", []string{"--proto", "tcp"}}}
	if rawPermitted(t) {
		cases = append(cases, struct {
			name  string
			flags []string
		}{"homa", nil})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := serveInBackground(t, append([]string{"--addr", "127.0.0.1:0"}, tc.flags...)...)
			if port == 0 {
				t.Fatal("serve announced port 0")
			}
			if tc.name == "tcp" {
				return
			}
			if port < bench.FreePortFirst || port > bench.FreePortLast {
				t.Errorf("port %d, want %d..%d", port, bench.FreePortFirst, bench.FreePortLast)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			code, out, errOut := runHoma(context.Background(), append([]string{"ping", "--addr", addr, "--count", "20"}, tc.flags...)...)
			if code != 0 || !strings.HasPrefix(out, "homa: ping "+addr+" from ") {
				t.Errorf("ping %s: exit %d, stdout %q, stderr %q", addr, code, out, errOut)
			}
		})
	}
}

// TestBenchRawRefused: when raw sockets are refused, a run of only
// protocols that need them fails before anything is measured, saying
// what to do; in a run with others they are skipped, each with a reason.
func TestBenchRawRefused(t *testing.T) {
	refuseRaw(t)
	for _, protos := range []string{"homa", "floor,homa"} {
		args := []string{"bench", "--proto", protos, "--count", "10"}
		code, out, errOut := runHoma(context.Background(), args...)
		checkOneLine(t, args, code, 1, errOut, "--proto "+protos+" needs raw IP sockets (CAP_NET_RAW), which this process may not open")
		if out != "" || !strings.Contains(errOut, "--proto homa-udp") {
			t.Errorf("%q: stdout %q, stderr %q; want no report and advice naming --proto homa-udp", args, out, errOut)
		}
	}
	code, out, errOut := runHoma(context.Background(), "bench", "--proto", "homa-udp,homa", "--count", "10")
	if code != 0 || !strings.Contains(out, "\n  homa-udp ") || strings.Contains(out, "\n  homa ") ||
		errOut != "homa: raw IP sockets not permitted (need CAP_NET_RAW); skipping homa (Homa over raw IP protocol 146, engine defaults)\n" {
		t.Errorf("--proto homa-udp,homa: exit %d, stdout %q, stderr %q; want homa-udp measured and homa skipped", code, out, errOut)
	}
}

// TestLabNeedsRoot: lab says it needs root before it looks for anything
// else.
func TestLabNeedsRoot(t *testing.T) {
	orig := labIsRoot
	labIsRoot = func() bool { return false }
	defer func() { labIsRoot = orig }()
	for _, args := range [][]string{{"lab"}, {"lab", "--cleanup"}} {
		code, out, errOut := runHoma(context.Background(), args...)
		checkOneLine(t, args, code, 1, errOut, "needs root")
		if out != "" {
			t.Errorf("%q: stdout %q", args, out)
		}
	}
}
