// Command oneway measures RPCs one at a time, with a pause between them,
// apart by direction: how long the request takes from the client's send
// to the server application's receipt, and the response from the
// server's reply to the client application's receipt. The client writes
// its send time into the request and the server its receipt and reply
// times into the response, all read from the one clock of the host, so
// the two directions add up to the round trip. It shows which end of an
// RPC that finds both ends idle is slow to wake up (docs/performance.md,
// "The receive path").
//
//	go run ./scripts/oneway                                  # homa, homa with the client parking, Go TCP
//	go run ./scripts/oneway --proto homa-udp,tcp --gap 5ms --count 5000
//
// Each protocol's server runs in a child process (this command, with
// --serve), the clients in this one, one protocol after the other. The
// protocols: homa (raw IP, engine defaults; needs CAP_NET_RAW),
// homa-udp, homa-park and homa-udp-park (the client parks at once
// instead of spinning for its response: PollDuration -1), and tcp (Go
// TCP, TCP_NODELAY).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/homa-go/homa/sock"
)

// msgLen is the length of each request and response: three timestamps
// and padding.
const msgLen = 100

func main() {
	protos := flag.String("proto", "homa,homa-park,tcp", "protocols to measure, comma-separated: homa, homa-udp, homa-park, homa-udp-park, tcp")
	count := flag.Int("count", 2000, "RPCs per protocol")
	gap := flag.Duration("gap", time.Millisecond, "pause between an RPC's end and the next one's start")
	random := flag.Bool("random", false, "draw each pause at random, exponentially distributed with mean --gap, as open-loop arrivals come")
	spawn := flag.Bool("spawn", false, "make each call from a goroutine of its own, as homa bench's workload mode does")
	serve := flag.String("serve", "", "serve protocol PROTO on --addr (how the command runs its servers)")
	addr := flag.String("addr", "127.0.0.1:4790", "the server's address")
	flag.Parse()
	ap, err := netip.ParseAddrPort(*addr)
	if err != nil {
		fatal(err)
	}
	if *serve != "" {
		fatal(runServer(*serve, ap))
	}
	apart := fmt.Sprintf("%v apart", *gap)
	if *random {
		apart = fmt.Sprintf("%v apart on average, at random", *gap)
	}
	fmt.Printf("one RPC of %d bytes at a time, %s, %d per protocol; µs, median / p90\n", msgLen, apart, *count)
	fmt.Printf("%-14s %-16s %-16s %-16s\n", "protocol", "request way", "response way", "round trip")
	for _, p := range strings.Split(*protos, ",") {
		r, err := measure(p, ap, *count, *gap, *random, *spawn)
		if err != nil {
			fmt.Fprintf(os.Stderr, "oneway: %s: %v\n", p, err)
			continue
		}
		fmt.Printf("%-14s %-16s %-16s %-16s\n", p, r.up, r.down, r.rtt)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "oneway:", err)
	os.Exit(1)
}

// config is the socket configuration of a Homa protocol's client (park
// says it parks at once) and server.
func config(proto string) (cfg *sock.Config, park bool, err error) {
	switch proto {
	case "homa", "homa-park":
		cfg = &sock.Config{Transport: sock.Raw}
	case "homa-udp", "homa-udp-park":
		cfg = &sock.Config{Transport: sock.UDP}
	default:
		return nil, false, fmt.Errorf("unknown protocol %q", proto)
	}
	return cfg, strings.HasSuffix(proto, "-park"), nil
}

// stamp writes the current time at off of b.
func stamp(b []byte, off int) { binary.LittleEndian.PutUint64(b[off:], uint64(time.Now().UnixNano())) }

// runServer answers each request with it, its receipt and reply times
// stamped in; it prints "ready" once it listens.
func runServer(proto string, ap netip.AddrPort) error {
	if proto == "tcp" {
		l, err := net.Listen("tcp", ap.String())
		if err != nil {
			return err
		}
		fmt.Println("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			go func() {
				defer c.Close()
				b := make([]byte, msgLen)
				for {
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					stamp(b, 8)
					stamp(b, 16)
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			}()
		}
	}
	cfg, _, err := config(proto)
	if err != nil {
		return err
	}
	s, err := sock.Open(ap, cfg)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		m, err := s.Recv(context.Background(), 0)
		if err != nil {
			return err
		}
		b := make([]byte, msgLen)
		copy(b, m.Data)
		stamp(b, 8)
		stamp(b, 16)
		err = s.Reply(m, b)
		m.Release()
		if err != nil {
			return err
		}
	}
}

// result is a protocol's figures, each "median / p90".
type result struct{ up, down, rtt string }

// measure starts proto's server and runs count RPCs against it.
func measure(proto string, ap netip.AddrPort, count int, gap time.Duration, random, spawn bool) (result, error) {
	srv := exec.Command(os.Args[0], "--serve", proto, "--addr", ap.String())
	srv.Stderr = os.Stderr
	out, err := srv.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := srv.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		return result{}, fmt.Errorf("server did not start: %q %v", line, err)
	}
	call, closeFn, err := dial(proto, ap)
	if err != nil {
		return result{}, err
	}
	defer closeFn()
	var up, down, rtt []float64
	req := make([]byte, msgLen)
	rng := rand.New(rand.NewPCG(1, 2))
	for range count {
		pause := gap
		if random {
			pause = time.Duration(rng.ExpFloat64() * float64(gap))
		}
		time.Sleep(pause)
		var resp []byte
		var end int64
		do := func() {
			stamp(req, 0)
			resp, err = call(req)
			end = time.Now().UnixNano()
		}
		if spawn {
			finished := make(chan struct{})
			go func() {
				defer close(finished)
				do()
			}()
			<-finished
		} else {
			do()
		}
		if err != nil {
			return result{}, err
		}
		sent, got, replied := at(resp, 0), at(resp, 8), at(resp, 16)
		up = append(up, float64(got-sent)/1e3)
		down = append(down, float64(end-replied)/1e3)
		rtt = append(rtt, float64(end-sent)/1e3)
	}
	return result{spread(up), spread(down), spread(rtt)}, nil
}

func at(b []byte, off int) int64 { return int64(binary.LittleEndian.Uint64(b[off:])) }

// spread is "median / p90" of xs.
func spread(xs []float64) string {
	slices.Sort(xs)
	return fmt.Sprintf("%.1f / %.1f", xs[len(xs)/2], xs[len(xs)*9/10])
}

// dial returns a function making one RPC with proto's client.
func dial(proto string, ap netip.AddrPort) (call func([]byte) ([]byte, error), closeFn func(), err error) {
	if proto == "tcp" {
		var c net.Conn
		for i := 0; ; i++ { // the server may still be setting up
			if c, err = net.Dial("tcp", ap.String()); err == nil || i == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return nil, nil, err
		}
		resp := make([]byte, msgLen)
		return func(req []byte) ([]byte, error) {
			if _, err := c.Write(req); err != nil {
				return nil, err
			}
			_, err := io.ReadFull(c, resp)
			return resp, err
		}, func() { c.Close() }, nil
	}
	cfg, park, err := config(proto)
	if err != nil {
		return nil, nil, err
	}
	if park {
		cfg.PollDuration = -1
	}
	s, err := sock.Open(netip.AddrPortFrom(ap.Addr(), 0), cfg)
	if err != nil {
		return nil, nil, err
	}
	resp := make([]byte, msgLen)
	return func(req []byte) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := s.Call(ctx, ap, req)
		if err != nil {
			return nil, err
		}
		defer m.Release()
		if len(m.Data) != msgLen {
			return nil, errors.New("short response")
		}
		return resp[:copy(resp, m.Data)], nil
	}, func() { s.Close() }, nil
}
