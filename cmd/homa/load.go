package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/sock"
)

// loadFlags are the flags of every command that generates load.
type loadFlags struct {
	size, count, warmup int
	timeout             time.Duration
	// maxSize is the largest --size: one Homa message (0), or more for
	// bench, whose RPC layers carry more.
	maxSize int
}

// register adds the flags to fs; a --size up to maxSize bytes (0: one
// Homa message) is taken.
func (l *loadFlags) register(fs *flag.FlagSet, count, maxSize int) {
	l.maxSize = maxSize
	fs.IntVar(&l.size, "size", 100, fmt.Sprintf("payload `bytes` per request (1..%d)", l.sizeLimit()))
	fs.IntVar(&l.count, "count", count, "measured round trips")
	fs.IntVar(&l.warmup, "warmup", -1, "unmeasured round trips first; -1 means count/10, at most 1000")
	fs.DurationVar(&l.timeout, "timeout", 60*time.Second, "give up after this long")
}

// sizeLimit is the largest --size.
func (l *loadFlags) sizeLimit() int {
	if l.maxSize > 0 {
		return l.maxSize
	}
	return sock.MaxMessage
}

func (l *loadFlags) check() error {
	switch {
	case l.size < 1 || l.size > l.sizeLimit():
		return fmt.Errorf("--size %d: must be 1..%d", l.size, l.sizeLimit())
	case l.count < 1:
		return fmt.Errorf("--count %d: must be at least 1", l.count)
	case l.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", l.timeout)
	}
	if l.warmup < 0 {
		l.warmup = min(l.count/10, 1000)
	}
	return nil
}

// load is the run of bench.Ping the flags ask for.
func (l *loadFlags) load() bench.Load {
	return bench.Load{Size: l.size, Count: l.count, Warmup: l.warmup, Timeout: l.timeout}
}
