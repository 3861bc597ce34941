package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"time"
)

// A pinger is the client side of one protocol under test: it sends a
// payload, waits for the echo, and returns it. Homa, TCP and UDP each have
// one; bench compares them through this interface alone.
type pinger interface {
	// roundTrip sends req and returns the echoed bytes, valid until the
	// next call. It gives up when ctx ends.
	roundTrip(ctx context.Context, req []byte) ([]byte, error)
	// close ends the client and any server started with it.
	close() error
}

// loadFlags are the flags of every command that generates load.
type loadFlags struct {
	size, count, warmup int
	timeout             time.Duration
}

func (l *loadFlags) register(fs *flag.FlagSet, count int) {
	fs.IntVar(&l.size, "size", 100, "payload `bytes` per request (1..1000000)")
	fs.IntVar(&l.count, "count", count, "measured round trips")
	fs.IntVar(&l.warmup, "warmup", -1, "unmeasured round trips first; -1 means count/10, at most 1000")
	fs.DurationVar(&l.timeout, "timeout", 60*time.Second, "give up after this long")
}

func (l *loadFlags) check() error {
	switch {
	case l.size < 1 || l.size > 1_000_000:
		return fmt.Errorf("--size %d: must be 1..1000000", l.size)
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

// errMismatch reports an echo that differs from the request.
var errMismatch = errors.New("echo differs from request")

// measure runs l.warmup then l.count round trips through p, one at a
// time, checks every echo byte for byte and records the round-trip times.
// It stops at the count, at the timeout, or when ctx ends; on an early
// stop it returns what it measured so far with the error.
func measure(ctx context.Context, p pinger, l loadFlags) (summary, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req := make([]byte, l.size)
	for i := range req {
		req[i] = byte(i*7 + 1)
	}
	lat := newLatencies(l.count)
	var start time.Time
	var seq [8]byte
	total := l.warmup + l.count
	for i := range total {
		if i == l.warmup {
			start = time.Now()
		}
		// A sequence number in front makes a stale or misrouted echo
		// fail the comparison.
		binary.LittleEndian.PutUint64(seq[:], uint64(i))
		copy(req, seq[:])
		t0 := time.Now()
		resp, err := p.roundTrip(ctx, req)
		rtt := time.Since(t0)
		if err == nil && !bytes.Equal(resp, req) {
			err = fmt.Errorf("%w: round trip %d sent %d bytes, got %d back%s",
				errMismatch, i, len(req), len(resp), firstDiff(req, resp))
		}
		if err != nil {
			return lat.summarize(l.size, time.Since(start)), stopReason(ctx, err, lat.len(), l)
		}
		if i >= l.warmup {
			lat.record(rtt)
		}
	}
	return lat.summarize(l.size, time.Since(start)), nil
}

// stopReason explains an early stop: a deadline or interrupt names how
// far the run got; any other error is returned as it is.
func stopReason(ctx context.Context, err error, done int, l loadFlags) error {
	switch {
	case errors.Is(err, errMismatch) || ctx.Err() == nil:
		return err
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("timed out after %v with %d of %d round trips done", l.timeout, done, l.count)
	}
	return fmt.Errorf("interrupted with %d of %d round trips done", done, l.count)
}

// firstDiff describes where two byte slices first differ.
func firstDiff(want, got []byte) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf(", first difference at byte %d", i)
		}
	}
	return ""
}
