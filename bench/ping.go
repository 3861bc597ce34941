package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A Pinger is the client side of an echo server: it sends a payload,
// waits for the echo and returns it, valid until its next call. It
// gives up when ctx ends.
type Pinger interface {
	RoundTrip(ctx context.Context, req []byte) ([]byte, error)
}

// pinger is a Pinger that bench closes: it ends the client and any
// server started with it.
type pinger interface {
	Pinger
	Close() error
}

// Load is a run of Ping: Warmup unmeasured round trips, then Count
// measured ones, of Size bytes each, all within Timeout.
type Load struct {
	Size, Count, Warmup int
	Timeout             time.Duration
}

// errMismatch reports an echo that differs from the request.
var errMismatch = errors.New("echo differs from request")

// Ping runs l.Warmup then l.Count round trips through p, one at a time,
// checks every echo byte for byte and records the round-trip times.
// It stops at the count, at the timeout, or when ctx ends; on an early
// stop it returns what it measured so far with the error.
func Ping(ctx context.Context, p Pinger, l Load) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	req := makePattern(l.Size)
	lat := newLatencies(l.Count)
	var start time.Time
	var seq [8]byte
	total := l.Warmup + l.Count
	for i := range total {
		if i == l.Warmup {
			start = time.Now()
		}
		// A sequence number in front makes a stale or misrouted echo
		// fail the comparison.
		binary.LittleEndian.PutUint64(seq[:], uint64(i))
		copy(req, seq[:])
		t0 := time.Now()
		resp, err := p.RoundTrip(ctx, req)
		rtt := time.Since(t0)
		if err == nil && !bytes.Equal(resp, req) {
			err = fmt.Errorf("%w: round trip %d sent %d bytes, got %d back%s",
				errMismatch, i, len(req), len(resp), firstDiff(req, resp))
			if len(resp) != len(req) {
				err = fmt.Errorf("%w (is the server a homa serve --reply-size %d? ping expects echoes of what it sends)", err, len(resp))
			}
		}
		if err != nil {
			return lat.summarize(l.Size, time.Since(start)), stopReason(ctx, err, lat.len(), l)
		}
		if i >= l.Warmup {
			lat.record(rtt)
		}
	}
	return lat.summarize(l.Size, time.Since(start)), nil
}

// stopReason explains an early stop: a deadline or interrupt names how
// far the run got; any other error is returned as it is.
func stopReason(ctx context.Context, err error, done int, l Load) error {
	switch {
	case errors.Is(err, errMismatch) || ctx.Err() == nil:
		return err
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("timed out after %v with %d of %d round trips done", l.Timeout, done, l.Count)
	}
	return fmt.Errorf("interrupted with %d of %d round trips done", done, l.Count)
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
