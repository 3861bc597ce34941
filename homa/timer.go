package homa

import "time"

// The endpoint's timers: the one runtime timer armed at the core's next
// deadline (reset after a batch's packets are out, or lazily for a
// spinning reader), the deadlines a spinning reader runs itself, the
// timer goroutine, and the grace after which the background reader
// takes the socket back.

// noteReset notes that the timer is to be reset to timerAt: by b's
// flush, or lazily for a caller's request or a response (see Lazy
// arming). A reset to a later deadline than the timer is set for is
// never left: the timer would fire in vain at the earlier one. The
// caller holds mu.
func (e *Endpoint) noteReset(b *txBatch) {
	e.timerDirty = true
	if (e.calling || e.replying && e.socketLeft()) && (e.timerSet == 0 || e.timerAt < e.timerSet) {
		e.timerLazy.Store(true)
		return
	}
	b.rearm = true
}

// Resetting a runtime timer wakes a thread (the one parked in the
// netpoller, to shorten its sleep, or an idle one to take its place):
// on a call's path, before the request leaves, that is a system call and
// a wake-up of another processor's thread the request waits for. So
// settle only notes the new deadline, and the flush of its batch resets
// the timer once the packets are out.

// Lazy arming. A caller's request sets a deadline (its RESEND), but the
// caller goes on to read the socket itself, spinning, and a spinning
// reader runs the core's due timers on its own (runDue): the timer is
// needed only once nobody spins. So the request's flush leaves the
// reset pending (timerLazy), and the first goroutine that parks on the
// socket, waits without reading it, or stops reading it, makes it
// (applyLazy). A response that comes within the caller's spin ends the
// deadline first, and the RPC costs no timer operation at all: the
// reset and the stop microseconds later used to wake a thread of the
// caller's process, which on two processors took the processor that
// the server's thread, woken by the request, was about to run on. A
// response's NEED_ACK deadline is left pending the same way: the
// server's reader spins for the acknowledgment (see Awaiting
// acknowledgments in poll.go), and one that comes within the spin ends
// the deadline first. That only while nobody reads the socket or is
// parked on it (a reader parked already would not wake for the reset:
// the acknowledgment lost, nothing would ever ask for it); should nobody
// come to read, the background reader takes the socket after its grace
// (armed by the response's flush) and makes the reset when it parks.

// applyTimer resets the timer to the deadline settle noted, if it is
// still to be done.
func (e *Endpoint) applyTimer() {
	e.mu.Lock()
	if e.timerDirty && e.timerOn && !e.closed && e.timerAt != e.timerSet {
		e.io.timerArms.Add(1)
		e.timerSet = e.timerAt
		e.timer.Reset(max(e.timerAt-e.now(), 0))
	}
	e.timerDirty = false
	e.timerLazy.Store(false)
	e.mu.Unlock()
}

// socketLeft reports whether no goroutine reads the socket or is parked
// on it: the next to come makes a reset left pending (see Lazy arming).
// One parked now would not wake for it.
func (e *Endpoint) socketLeft() bool {
	return e.poller != nil && !e.appReading.Load() && !e.rxParked.Load()
}

// applyLazy makes a reset left pending for a caller (see Lazy arming).
func (e *Endpoint) applyLazy() {
	if e.timerLazy.Load() {
		e.applyTimer()
	}
}

// stopTimer disarms the timer. The caller holds mu.
func (e *Endpoint) stopTimer() {
	e.timer.Stop()
	e.timerSet = 0
	e.timerOn, e.timerDirty = false, false
	e.timerLazy.Store(false)
	e.dueAt.Store(0)
}

// staleTimer is how much later than the armed timer the core's next
// deadline must be for settle to re-arm the timer: a deadline that moves
// a little (the oldest of many RPCs in flight completed) is not worth a
// timer operation per message; one that moved by a tick or more (the
// last RPC ended) is worth a wake-up saved.
const staleTimer = time.Millisecond

// noteQuiet records whether the endpoint is quiet: nothing in progress
// in the core, and no goroutine waiting in Recv. If it is not while no
// goroutine in Recv reads, the background reader may take the socket
// after its grace (see awaitReaders): b's flush arms the grace timer,
// after the packets are out (see applyTimer), unless the caller reads
// next (a Call's request: calling). The caller holds mu.
func (e *Endpoint) noteQuiet(b *txBatch) {
	q := e.core.Quiet() && e.mb.Waiting() == 0 && !e.shared
	if e.quiet.Load() != q {
		e.quiet.Store(q)
	}
	if a := e.core.AwaitsAcks(); e.ackWait.Load() != a {
		e.ackWait.Store(a)
	}
	if !q && !e.calling && e.rxIdle.Load() && !e.appReading.Load() {
		b.grace = true
	}
}

// graceAfterFlush arms the grace timer noteQuiet asked for, if the
// socket is still left alone.
func (e *Endpoint) graceAfterFlush() {
	if !e.quiet.Load() && e.rxIdle.Load() && !e.appReading.Load() {
		e.armGrace(readerGrace)
	}
}

// trimDue trims the buffer pool, the endpoint's cache in front of it and
// what the core keeps for reuse, if its time has come, and sets the next
// trim while any of them holds something a trim may let go of. The
// caller holds mu.
func (e *Endpoint) trimDue(now time.Duration) {
	if e.trimAt == 0 || now < e.trimAt {
		return
	}
	e.trimAt = 0
	holds := e.cache.trim() // first: the pool lets its idle buffers go now
	holds = e.core.Trim() || holds
	holds = trimPool() || holds
	e.out.Trim()
	if holds {
		e.trimAt = now + trimEvery
	}
}

// runDue runs the core's timers, if due at now, for a reader spinning on
// the socket, and stops the timer: the timer goroutine need not wake up
// (a thread wake-up, which on a machine whose processors are busy
// spinning takes one from a spinner). Should the timer have fired
// anyway, the timer goroutine finds nothing due.
func (e *Endpoint) runDue(now time.Duration, b *txBatch) {
	e.mu.Lock()
	if e.closed || !e.timerOn || now < e.timerAt || e.postpone(now) {
		e.mu.Unlock()
		return
	}
	e.stopTimer()
	e.trimDue(now)
	e.core.Tick(now, &e.out)
	e.settle(b)
	e.mu.Unlock()
	e.flush(b)
}

// Timers wait for the socket. A timer that comes due while the socket
// holds packets not yet read would judge peers on what it has not seen:
// the client of an overloaded process RESENDs for responses sitting in
// its own receive queue, and its server retransmits them. So while the
// last read filled its batch (more packets are likely waiting), due
// timers wait for the readers to catch up, for at most maxPostpone past
// their time, and run as soon as a read finds the socket drained.
const (
	maxPostpone  = 2 * time.Millisecond
	postponeStep = 100 * time.Microsecond
)

// postpone reports whether timers due at timerAt should wait at now for
// the readers. The caller holds mu.
func (e *Endpoint) postpone(now time.Duration) bool {
	return e.behind && now-e.timerAt < maxPostpone
}

// wakeBlocked wakes the goroutine in Recv parked reading the socket if
// another goroutine handed it its message. The caller holds mu.
func (e *Endpoint) wakeBlocked() {
	if w := e.rxBlocked; w != nil && w != e.rxSelf && len(w.C) > 0 {
		e.waker.Wake()
	}
}

// timerLoop runs the core's timers when they are due. It sleeps while
// the core has none.
func (e *Endpoint) timerLoop() {
	defer e.wg.Done()
	for {
		select {
		case <-e.timer.C:
		case <-e.done:
			e.timer.Stop()
			return
		}
		e.io.wakeups.Add(1)
		b := e.getBatch()
		e.mu.Lock()
		if !e.closed && e.postpone(e.now()) {
			e.timerSet = e.now() + postponeStep
			e.timer.Reset(postponeStep)
			e.mu.Unlock()
			e.putBatch(b)
			continue
		}
		e.timerSet = 0
		if !e.closed {
			e.timerOn, e.timerDirty = false, false
			e.dueAt.Store(0)
			now := e.now()
			if at, ok := e.core.Next(); (!ok || at > now) && (e.trimAt == 0 || e.trimAt > now) {
				e.io.vain.Add(1)
			}
			e.trimDue(now)
			e.core.Tick(now, &e.out)
			e.settle(b)
		}
		e.mu.Unlock()
		e.sendBatch(b)
	}
}
