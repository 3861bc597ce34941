package bench

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progress prints a line to w every interval while a phase of a long run
// goes on: time in the phase, RPCs completed, and the rate since the
// previous line. A nil *progress prints nothing.
type progress struct {
	w     io.Writer
	every time.Duration
	name  string // the protocol
	done  atomic.Int64
}

// add counts one completed RPC.
func (p *progress) add() {
	if p != nil {
		p.done.Add(1)
	}
}

// phase starts reporting a phase, with extra appended to every line if
// not nil, and returns the function that stops it.
func (p *progress) phase(name string, extra func() string) (stop func()) {
	if p == nil {
		return func() {}
	}
	p.done.Store(0)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.report(name, extra, quit) })
	return func() {
		close(quit)
		wg.Wait()
	}
}

func (p *progress) report(phase string, extra func() string, quit <-chan struct{}) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	start, prevT, prevN := time.Now(), time.Now(), int64(0)
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			n := p.done.Load()
			rate := float64(n-prevN) / now.Sub(prevT).Seconds()
			more := ""
			if extra != nil {
				more = extra()
			}
			fmt.Fprintf(p.w, "homa bench: %s %s: %.1fs, %d RPCs, %.0f RPCs/s%s\n",
				p.name, phase, now.Sub(start).Seconds(), n, rate, more)
			prevT, prevN = now, n
		}
	}
}
