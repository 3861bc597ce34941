package core

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestTimerWheel checks the wheel against a plain map of deadlines:
// arming (only ever earlier), disarming and the clock moving on in
// random orders, near and far (beyond the wheel's reach), fire every
// timer once at the first popDue at or after its deadline, and next is
// the earliest deadline (or, for one set in the past, a time not later
// than now).
func TestTimerWheel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const tick = time.Millisecond
		var w timerWheel
		w.init(tick)
		timers := make([]timer, 8)
		for i := range timers {
			timers[i].idx = -1
		}
		want := map[int]time.Duration{} // set timers: their deadline
		now := time.Duration(0)
		for range rapid.IntRange(1, 200).Draw(rt, "steps") {
			i := rapid.IntRange(0, len(timers)-1).Draw(rt, "timer")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				ticks := rapid.OneOf(rapid.IntRange(-3, 40), rapid.IntRange(wheelSlots-5, 3*wheelSlots)).Draw(rt, "ticks")
				at := max(now/tick*tick+time.Duration(ticks)*tick, 0)
				w.arm(&timers[i], at)
				if old, ok := want[i]; !ok || at < old {
					want[i] = at
				}
			case 2:
				w.disarm(&timers[i])
				delete(want, i)
			case 3:
				now += time.Duration(rapid.OneOf(rapid.IntRange(0, 30), rapid.IntRange(1000, 3*wheelSlots)).Draw(rt, "advance")) * tick
				for {
					p := w.popDue(now)
					if p == nil {
						break
					}
					j := -1
					for k := range timers {
						if p == &timers[k] {
							j = k
						}
					}
					at, ok := want[j]
					if !ok || at > now || p.idx >= 0 {
						rt.Fatalf("timer %d fired at %v: set %v for %v, still marked set: %v", j, now, ok, at, p.idx >= 0)
					}
					delete(want, j)
				}
				for j, at := range want {
					if at <= now {
						rt.Fatalf("timer %d due at %v did not fire by %v", j, at, now)
					}
				}
			}
			if w.len() != len(want) {
				rt.Fatalf("%d timers set, the wheel holds %d", len(want), w.len())
			}
			next, ok := w.next()
			if ok != (len(want) > 0) {
				rt.Fatalf("next ok %v with %d timers set", ok, len(want))
			}
			if ok {
				earliest := time.Duration(1 << 62)
				for _, at := range want {
					earliest = min(earliest, at)
				}
				if next != earliest && !(earliest < now && next <= now) {
					rt.Fatalf("next %v, earliest deadline %v, now %v", next, earliest, now)
				}
			}
		}
	})
}
