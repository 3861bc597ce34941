package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/sock"
)

// engineFlags tune the Homa engine of every socket a command opens. Their
// zero values keep the engine's defaults (Linux's, which suit fast links
// and loopback).
type engineFlags struct {
	linkMbps     int
	unschedBytes int
	poll         time.Duration
	polling      string
	peerTimeout  time.Duration
}

func (f *engineFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.linkMbps, "link-mbps", 0, "Homa: pace outgoing data at `M` Mbit/s (the engine's LinkMbps; 0 off); ignored by other protocols")
	fs.IntVar(&f.unschedBytes, "unsched-bytes", 0, "Homa: `bytes` of each message sent before grants (0: the default, 40000, sized for 25 Gbit/s links, and 131072 to loopback peers; about one round trip of the link is right)")
	fs.DurationVar(&f.poll, "poll", 0, "Homa: how long a receiver spins on its socket before it parks (the engine's PollDuration; 0: the default, 50µs; negative: never, which leaves the CPU to the other end on a busy machine)")
	fs.DurationVar(&f.peerTimeout, "peer-timeout", 0, "Homa: how long a peer may leave an RPC unanswered while asked (RESEND every 5 ms) before it fails with a peer timeout (the engine's PeerTimeout; 0: the default, 105ms); longer suits a loaded machine, whose processes may not run for that long")
	fs.StringVar(&f.polling, "polling", "adaptive", "Homa: whether a receiver spins: `adaptive` (a caller for its response; a server only while its requests come close together), always (for --poll after each packet) or never")
}

func (f *engineFlags) check() error {
	switch {
	case f.linkMbps < 0:
		return fmt.Errorf("--link-mbps %d: must not be negative", f.linkMbps)
	case f.unschedBytes < 0 || f.unschedBytes > sock.MaxMessage:
		return fmt.Errorf("--unsched-bytes %d: must be 0..%d", f.unschedBytes, sock.MaxMessage)
	case f.peerTimeout < 0:
		return fmt.Errorf("--peer-timeout %v: must not be negative", f.peerTimeout)
	}
	return checkPolling(f.polling)
}

// checkPolling checks a --polling value.
func checkPolling(name string) error {
	if _, ok := bench.ParsePolling(name); !ok {
		return fmt.Errorf("--polling %q: must be adaptive, always or never", name)
	}
	return nil
}

// config is the socket configuration the flags ask for (engine tuning;
// the caller sets the transport).
func (f *engineFlags) config() sock.Config {
	polling, _ := bench.ParsePolling(f.polling)
	return sock.Config{LinkMbps: f.linkMbps, UnschedBytes: f.unschedBytes, PollDuration: f.poll, Polling: polling, PeerTimeout: f.peerTimeout}
}
