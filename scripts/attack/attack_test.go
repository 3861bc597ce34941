package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/internal/tools/homabin"
)

// TestAttacks runs a small version of every scenario against a real
// homa serve and asserts the same bounds as the command. It needs root
// (raw sockets that write their own IP header).
func TestAttacks(t *testing.T) {
	if err := canForge(); errors.Is(err, errNoRawIP) {
		t.Skipf("skipping: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		t.Skip("builds and runs homa serve: not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, remove, err := homabin.Build(ctx, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	goroutines := runtime.NumGoroutine()
	o := &options{
		homa:      bin,
		sources:   200,
		perSource: 5,
		peers:     peerTable + 600, // enough to evict, not more: at 5000/s, 3.4 s
		rpcs:      50,
		// Slow enough that a loaded two-core machine keeps up (see
		// docs/threat-model.md: each forged claim costs the server up to
		// 20 RESENDs).
		rate:  5000,
		after: time.Second,
	}
	for _, tc := range []struct {
		name string
		run  func() result
	}{
		{"claims", func() result { return claims(ctx, o, 500) }},
		{"sources", func() result { return sources(ctx, o) }},
		{"resend", func() result { return resend(ctx, o) }},
		{"peers", func() result { return peers(ctx, o) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run()
			t.Logf("%s: %s", r.name, r.measured)
			if !r.pass {
				t.Errorf("%s: outside its bound (%s)", r.name, r.bound)
			}
		})
	}
	if kids := children(t); kids != "" {
		t.Errorf("child processes left running: %s", kids)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the scenarios, %d before", n, goroutines)
	}
}

// children lists the process ids of this process's children, from
// /proc/self/task/*/children.
func children(t *testing.T) string {
	files, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	return strings.Join(pids, " ")
}

// testWriter writes to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestAnnouncements reads the addresses from serve's output, written in
// pieces that split the lines.
func TestAnnouncements(t *testing.T) {
	a := newAnnouncements()
	out := "homa: metrics at http://127.0.0.1:4321/metrics\nhoma: echo server on 127.0.0.1:1234 (raw IP protocol 146)\n"
	for i := 0; i < len(out); i += 7 {
		select {
		case <-a.ready:
			t.Fatalf("ready after %d bytes of %d", i, len(out))
		default:
		}
		a.Write([]byte(out[i:min(i+7, len(out))]))
	}
	select {
	case <-a.ready:
	default:
		t.Fatal("not ready after both lines")
	}
	if a.serverAddr != "127.0.0.1:1234" || a.metricsURL != "http://127.0.0.1:4321/metrics" {
		t.Errorf("server %q, metrics %q", a.serverAddr, a.metricsURL)
	}
}

// TestParse checks the flags' bounds.
func TestParse(t *testing.T) {
	for _, bad := range [][]string{
		{"--claims", "0"}, {"--claims", "10,x"}, {"--peers", "70000"}, {"--peers", "16384"}, {"--sources", "0"},
		{"--rate", "-1"}, {"--run", "ax"}, {"--run", ""}, {"extra"},
	} {
		if _, err := parse(bad, testWriter{t}); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	o, err := parse([]string{"--claims", "5, 7", "--run", "ad"}, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.claims) != 2 || o.claims[0] != 5 || o.claims[1] != 7 || o.peers != 50000 {
		t.Errorf("parsed %+v", o)
	}
}

// TestForged checks the forged address blocks.
func TestForged(t *testing.T) {
	if a := forged(blockPeers, 0); a.String() != "127.68.0.1" {
		t.Errorf("first address %v", a)
	}
	if a := forged(blockPeers, 0xfffd); a.String() != "127.68.255.254" || !forgedNet.Contains(a) {
		t.Errorf("last address %v", a)
	}
	defer func() {
		if recover() == nil {
			t.Error("address past the /16: no panic")
		}
	}()
	forged(blockPeers, 0xfffe)
}
