//go:build linux

package netio

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fanoutCounts are the numbers of idle extra sockets BenchmarkRawFanout
// opens beside the measured pair.
var fanoutCounts = []int{0, 1, 5, 20, 100, 1000}

// BenchmarkRawFanout measures what idle protocol 146 sockets elsewhere on
// the host cost a raw-IP ping-pong between two other Conns: the kernel
// clones every arriving packet for each of them before their filters
// drop it. The idle sockets are
//
//   - other: raw sockets of protocol 146 opened with a filter for a
//     port nobody uses, as other processes' Conns would be;
//   - bound, connected: the same, bound to 127.0.0.2, or connected to
//     it: the kernel's raw socket match compares those addresses with
//     the packet's, so these cost nothing when they differ;
//   - conns: raw Conns opened by OpenRaw in this process;
//   - udp: UDP Conns, beside a UDP ping-pong, for comparison.
//
// The pair is a client Conn (port 0, opened after the idle ones: shared
// when they are Conns of this process) and a server Conn (a port given).
// Besides ns/op (one round trip) it reports the median round trip, the
// CPU time of the process per round trip (the receiving softirq runs in
// the sender's system calls on loopback, so it is in it) and packets per
// second, and the protocol 146 sockets open on the host during the run
// (raw146-sockets: the idle ones, the pair's, and any of other
// processes).
func BenchmarkRawFanout(b *testing.B) {
	for _, kind := range []string{"other", "bound", "connected", "conns", "udp"} {
		for _, n := range fanoutCounts {
			b.Run(fmt.Sprintf("%s/extra=%d", kind, n), func(b *testing.B) {
				open := func(p uint16) (Conn, error) { return OpenRaw(lo4, p, nil) }
				if kind == "udp" {
					open = func(p uint16) (Conn, error) { return OpenUDP(lo4, p, nil) }
				}
				switch kind {
				case "other", "bound", "connected":
					openIdleRaw(b, n, kind)
				default:
					openIdleConns(b, n, open)
				}
				x, err := open(0)
				if errors.Is(err, ErrPermission) {
					b.Skipf("raw sockets need CAP_NET_RAW: %v", err)
				}
				if err != nil {
					b.Fatal(err)
				}
				defer x.Close()
				y := openRandomPort(b, open) // a server's port: never shared
				defer y.Close()
				host, _ := HostRawSockets()
				timedPingPong(b, x, y)
				b.ReportMetric(float64(host), "raw146-sockets")
			})
		}
	}
}

// openIdleConns opens n Conns that nothing sends to, closed at the end
// of the benchmark.
func openIdleConns(b *testing.B, n int, open func(uint16) (Conn, error)) {
	for range n {
		c, err := open(0)
		if errors.Is(err, ErrPermission) {
			b.Skipf("raw sockets need CAP_NET_RAW: %v", err)
		}
		if err != nil {
			b.Fatalf("idle Conn: %v", err)
		}
		b.Cleanup(func() { c.Close() })
	}
}

// openIdleRaw opens n IPv4 raw sockets of protocol 146, each filtered
// to a Homa port that nothing uses, and bound to 127.0.0.2 or connected
// to it as kind says, closed at the end of the benchmark.
func openIdleRaw(b *testing.B, n int, kind string) {
	other := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 2}}
	filter, err := portFilter(false, 1)
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ipProtoHoma)
		if errors.Is(err, unix.EPERM) {
			b.Skipf("raw sockets need CAP_NET_RAW: %v", err)
		}
		if err != nil {
			b.Fatalf("idle raw socket: %v", err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		if err := attachFilter(fd, filter); err != nil {
			b.Fatal(err)
		}
		switch kind {
		case "bound":
			err = unix.Bind(fd, other)
		case "connected":
			err = unix.Connect(fd, other)
		}
		if err != nil {
			b.Fatalf("%s idle raw socket: %v", kind, err)
		}
	}
}

// timedPingPong is pingPong that also reports the median round trip,
// the process's CPU time per round trip and packets per second.
func timedPingPong(b *testing.B, x, y Conn) {
	ping := []Packet{{Buf: testPacket(x.Port(), y.Port(), 100, 1), N: 100, Addr: lo4}}
	pong := []Packet{{Buf: testPacket(y.Port(), x.Port(), 100, 2), N: 100, Addr: lo4}}
	rx, ry := makePackets(1, 2048), makePackets(1, 2048)
	read := func(c Conn, pkts []Packet) {
		if k, err := c.ReadBatch(pkts); err != nil || k != 1 {
			b.Fatalf("read %d, %v", k, err)
		}
	}
	const maxSamples = 1 << 16
	samples := make([]time.Duration, 0, maxSamples)
	b.ReportAllocs()
	start, cpu := time.Now(), cpuTime()
	for b.Loop() {
		t0 := time.Now()
		if _, err := x.WriteBatch(ping); err != nil {
			b.Fatal(err)
		}
		read(y, ry)
		if _, err := y.WriteBatch(pong); err != nil {
			b.Fatal(err)
		}
		read(x, rx)
		if len(samples) < maxSamples {
			samples = append(samples, time.Since(t0))
		}
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu
	slices.Sort(samples)
	if len(samples) > 0 {
		b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "median-µs")
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(2*float64(b.N)/elapsed.Seconds(), "pkts/s")
}
