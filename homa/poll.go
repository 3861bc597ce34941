package homa

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// Polling: a goroutine waiting in Recv that reads the socket itself
// spins on non-blocking reads for a while before it parks in the
// netpoller, since waking a parked thread costs microseconds (tens on a
// virtual machine). Spinning trades CPU for latency, and pays only when
// what the reader waits for comes soon.
//
// With PollAlways every reader spins for PollDuration after each sign of
// activity, as Linux Homa polls (50 µs): an idle endpoint spins for at
// most that long after its last packet, and a server whose requests come
// seldom spends that much CPU on each. PollAdaptive, the default, saves
// that CPU on servers: a client waiting for the response of an RPC it
// sent expects it within a round trip and the server's work, so it spins
// as above, but a goroutine waiting for any message (a server waiting
// for requests) cannot know when the next comes, so whether it spins
// adapts to the gaps between the requests of the recent past (see
// Adaptive polling below).
//
// A client's wait for a response includes the server's work on the
// request, which grows with its length: copying a 1 MB request into the
// application and a 1 MB response out takes hundreds of microseconds.
// A client that parked after PollDuration would then need a thread
// wake-up for the response, and a server that parked meanwhile another
// for the grants of the response: 1 MB echoes between two processes
// took 1.9-2.4 ms with the client spinning PollDuration, 0.84 ms
// spinning 2 ms. So a client spins dueSpinPerByte longer per byte of
// its request. The same holds the other way: a client that echoes,
// checks or copies a 1 MB response takes hundreds of microseconds before
// its next request, and a server parked meanwhile needs a wake-up for
// it, which on two busy virtual CPUs can wait for a scheduler tick (1
// ms and more). So a server waiting for requests spins dueSpinPerByte
// longer per byte of the last request it received: 1 MB echoes between
// two processes took 460-490 µs (median) instead of 700-1,050 µs, for
// less CPU per RPC.
//
// An earlier PollAdaptive scored whether spins had paid and probed now
// and then while parked (a parked reader learned nothing from its own
// waits); on two virtual CPUs its servers missed requests often enough
// that RPCs one at a time took 19-27 µs against 15-21 µs with
// PollAlways. The gaps between requests, which a parked server sees as
// well as a spinning one, replaced it.

// Polling selects how a reader spins (Config.Polling).
type Polling uint8

const (
	// PollAdaptive spins while waiting for a response, and while
	// waiting for any message only while such messages have lately come
	// close together (see Adaptive polling): as fast as PollAlways for
	// RPCs back to back, much less CPU on servers whose requests come
	// seldom. The default.
	PollAdaptive Polling = iota
	// PollAlways spins for PollDuration (stretched, see Stretching)
	// after the last packet before it parks, as Linux Homa polls: a
	// reader that waits longer spends PollDuration of CPU before it
	// parks.
	PollAlways
	// PollNever parks at once: the least CPU, a wake-up per message.
	PollNever
)

// spinBudget decides how long readers spin, shared by the endpoint's
// readers (one at a time: the holder of rxTok).
type spinBudget struct {
	max  time.Duration
	mode Polling
	// served is the length of the last request delivered to the
	// application: a reader waiting for any message spins longer after a
	// long one.
	served atomic.Int64
	// The recent past (see Adaptive polling and Stretching): when the
	// last message for a goroutine waiting for any message came, the
	// average gap between such messages, and the average wait for a
	// response.
	lastAny, gapAvg, waitAvg atomic.Int64
	// gapDev is the average distance of the gaps from gapAvg: gaps that
	// keep step (two ends taking turns) lie close to their average,
	// requests arriving at random do not.
	gapDev atomic.Int64
	// yieldEvery is how many turns of a spinning reader pass between
	// yields of its processor (see spinRead).
	yieldEvery uint32
	// yieldCPU: a reader that has found nothing for PollDuration also
	// yields its thread's processor, to other threads, once in
	// yieldRarely turns (see Yielding the CPU).
	yieldCPU bool
	// oneProc: the process has one processor, which a spinner keeps from
	// the network poller (see One processor).
	oneProc bool
}

// One processor. The runtime polls the network for goroutines parked on
// sockets only when a processor has nothing else to run (or every 10
// ms, from its monitor thread). With GOMAXPROCS 1 a spinning reader,
// which yields to the other goroutines at every turn but is itself
// always runnable, keeps the only processor from ever having nothing to
// run: a packet for another endpoint of the process parked on its
// socket waits until the spin ends. When that endpoint is the server
// the spinner waits for (client and server in one process), the round
// trip lasts the whole spin: W1 at 1 Mbit/s with both ends in one
// process and GOMAXPROCS 1, 203 µs median against TCP's 45 µs.
// So with one processor a reader stops spinning, and parks, once a
// packet waits for another endpoint of the process parked on its
// socket (parked: a ppoll of that socket per turn while one is
// parked); then the processor, with nothing to run, polls the network
// and wakes that endpoint. The reader that stopped parks as one that
// yielded: the endpoint that wakes wakes it too (Wake, no system call),
// so that it spins again, and two endpoints that answer each other spin
// in turn rather than settle on both parking (which made RPCs one at a
// time in one process 26 µs rather than 17). Not as soon as another
// endpoint parks, only once a packet waits for it: otherwise a server
// parked between requests would stop its client's spins for nothing.
// Goroutines parked on other sockets of the process (TCP connections,
// say) are not looked at: with one processor, each spin delays them by
// up to its length, as any busy goroutine would. A process with more
// processors needs none of this: another processor, with nothing to
// run, polls the network.

// Yields of a spinning reader: rarely on a kernel socket, so that timers
// and goroutines readied on its processor still run; at every turn on a
// Conn whose packets goroutines of this process deliver, or when there
// is only one processor.
const (
	yieldRarely = 16
	yieldAlways = 1
)

// Yielding the CPU. runtime.Gosched lets the process's other goroutines
// run, not other threads: a thread the kernel has queued on the spinner's
// processor waits until the spin ends or the kernel preempts it, up to a
// scheduler slice. And the kernel queues woken threads there: it places
// a thread woken by a packet on its waker's processor when it sees no
// idle one to take it, and on a virtual machine whose idle processors
// are halted (and whose kernel packs threads onto few virtual
// processors) it rarely does: 79% of a client's and 89% of a server's
// thread wake-ups under W1 landed on the waker's own processor
// (docs/performance.md, "The receive path"). A client that sends a
// request and spins for the response thus keeps the server's thread,
// woken by the request, off the processor it was queued on, for up to
// the whole spin (1 ms after a 1 MB request). So on a kernel socket a
// spinner that has found nothing for PollDuration (the peer is not
// answering from a spinning thread of its own) also yields its thread's
// processor once in yieldRarely empty turns (sched_yield, which returns
// at once when no other thread waits there). Not sooner: yielding at
// each spin's first empty turn made 100-byte RPCs one at a time slower
// (median 13.6 -> 20.7 µs, eight alternated pairs), and once in 16 turns
// from the spin's start halved their rate (a tail of long stalls):
// between two ends that answer each other within microseconds, a yield
// hands the processor to whatever thread waits there, presumably often
// the other end's, which then shares one processor with the spinner
// rather than spinning on its own. W4 at
// 500 Mbit/s between two processes, eight alternated pairs: p99 of the
// shortest tenth 741 -> 541 µs; one at a time unchanged within the noise.

// Awaiting acknowledgments. A server that answered a client which
// acknowledges at once (core.AwaitsAcks) receives the acknowledgment
// within microseconds of the response's arrival. A server goroutine
// back in Recv that would park at once (PollAdaptive, requests coming
// seldom) spins for it instead, for up to PollDuration, and stops as
// soon as it came: the acknowledgment then costs no thread wake-up, and
// the response's NEED_ACK deadline, left pending for this reader (see
// Lazy arming in timer.go), is gone before any timer was set for it.
// The client's thread that sends the acknowledgment was woken by the
// response, which the kernel tends to queue on the server's processor
// (see Yielding the CPU): so this spin yields its processor from its
// first empty turn, and again once in yieldRarely. Without those
// yields, server and client in one process, the acknowledgment came
// after the spin every time. Idle UDP server, a request every 8 ms
// (TestParkedPathWakeups): the server's parks per RPC 2.0 -> 1.0, its
// timers set 3.0 -> 1.1 (the grace its goroutine arms when it takes a
// request), the process's voluntary context switches 10.2-10.8 -> 7.8.

// dueSpinPerByte is how much longer a client spins for a response per
// byte of its request: 1 ms for a 1 MB request, a few times what the
// server's copies of it take.
const dueSpinPerByte = time.Nanosecond

// Adaptive polling. A spin pays when what the reader waits for comes
// within it: then it saves a thread wake-up, which costs a few
// microseconds of CPU and tens of microseconds of latency on a virtual
// machine; otherwise it burns its whole budget. A goroutine waiting for
// any message (a server waiting for requests) reads whether the next
// one will come within its budget off the socket's recent past: the
// average gap between the messages such goroutines received. It spins
// while that average is below payFactor times its budget, and parks at
// once otherwise. The average is measured whether the reader spun or
// parked (a parked reader's gaps include its wake-up, tens of
// microseconds: small against the gaps that make it park), so a server
// whose requests quicken starts spinning again with no probe. Requests
// one at a time, back to back, keep the server spinning (each comes
// within microseconds of the last response); requests arriving at
// random a millisecond apart leave it parked, at one wake-up per
// request instead of PollDuration of spinning after each. A goroutine
// waiting for a response always spins: its response is due within a
// round trip and the server's work, and were clients to adapt too, each
// end would see the other's wake-ups in its waits and both would settle
// on parking, at two wake-ups per RPC.
const (
	payFactor = 2
	// gapCap bounds one gap's weight in the average, in budgets: one
	// long pause moves the average to parking, not for long.
	gapCap = 8
)

func (s *spinBudget) init(cfg Config, conn netio.Conn) {
	s.max, s.mode = cfg.PollDuration, cfg.Polling
	if s.max <= 0 {
		s.mode = PollNever
	}
	s.served.Store(0)
	s.lastAny.Store(0)
	s.gapAvg.Store(0)
	s.gapDev.Store(0)
	s.waitAvg.Store(0)
	s.yieldEvery = yieldRarely
	inProcess := false
	if ip, ok := conn.(netio.InProcess); ok {
		inProcess = ip.InProcess()
	}
	if inProcess || runtime.GOMAXPROCS(0) == 1 {
		s.yieldEvery = yieldAlways
	}
	s.yieldCPU = !inProcess
	s.oneProc = !inProcess && runtime.GOMAXPROCS(0) == 1
}

// Stretching. Two ends that each spin PollDuration for the other stay
// in step only while each answers within the other's spin. A thread
// wake-up on a virtual machine takes about as long (60 µs and more): one
// end that parks once answers late, the other's spin runs out and it
// parks too, and from then on every RPC pays two wake-ups (RPCs one at a
// time took 125-165 µs this way against 12-15 µs, whichever way a run
// started). So a reader stretches its spin to twice the average wait
// of the recent past (for a response: from Recv to its arrival; for any
// message: the gap between arrivals), up to stretchCap times
// PollDuration: the two ends then catch each other's messages again,
// the waits shrink, and so do the spins. A server stretches only while
// its requests keep step (their gaps lie within half their average of
// it): requests arriving at random 150 µs apart (W1 at 10 Mbit/s) would
// keep a stretched server spinning nearly all the time, for little. Waits longer than the cap are
// not worth spinning for: the budget stays PollDuration (and with
// PollAdaptive a server waiting for any message parks at once).
const stretchCap = 4

// stretch is budget b stretched to cover twice the average wait avg.
func (s *spinBudget) stretch(b time.Duration, avg int64) time.Duration {
	limit := stretchCap * s.max
	if a := time.Duration(avg); a > 0 && a < limit {
		return max(b, min(2*a, limit))
	}
	return b
}

// budget is how long a reader spins now, after each sign of activity;
// due says it waits for the response of an RPC it sent, whose request
// was request bytes long. A reader waiting for any message spins longer
// after a long request (served).
func (s *spinBudget) budget(due bool, request int) time.Duration {
	switch {
	case s.mode == PollNever:
		return 0
	case due:
		b := s.max + time.Duration(request)*dueSpinPerByte
		return s.stretch(b, s.waitAvg.Load())
	}
	b := s.max + time.Duration(s.served.Load())*dueSpinPerByte
	gap := s.gapAvg.Load()
	if s.mode == PollAdaptive && time.Duration(gap) >= max(payFactor*b, stretchCap*s.max) {
		return 0 // the next request is not likely to come within b
	}
	if 2*s.gapDev.Load() >= gap {
		return b // requests at random: a longer spin would mostly run out
	}
	return s.stretch(b, gap)
}

// arrived records that a message for a goroutine waiting for any
// message came at now.
func (s *spinBudget) arrived(now time.Duration) {
	if s.mode == PollNever {
		return
	}
	last := time.Duration(s.lastAny.Swap(int64(max(now, 1))))
	if last > 0 {
		gap := min(now-last, gapCap*s.max)
		average(&s.gapDev, (gap - time.Duration(s.gapAvg.Load())).Abs())
		average(&s.gapAvg, gap)
	}
}

// waited records that a goroutine waited d for a response.
func (s *spinBudget) waited(d time.Duration) {
	if s.mode != PollNever {
		average(&s.waitAvg, min(d, gapCap*s.max))
	}
}

// average moves avg an eighth of the way to sample. Its writers hold mu
// or rxTok; a lost update only delays the average.
func average(avg *atomic.Int64, sample time.Duration) {
	old := avg.Load()
	avg.Store(old + (int64(sample)-old)/8)
}

// parkedSet is the endpoints of the process whose readers are parked on
// their sockets, those of endpoints that spin with one processor (see
// One processor) and whose Conn tells whether a packet waits.
type parkedSet struct {
	n  atomic.Int32 // len(on), read without mu
	mu sync.Mutex
	on map[*Endpoint]netio.Queued
	// yielded are the endpoints whose readers stopped spinning for a
	// parked one: the next to wake wakes them.
	yielded map[*Endpoint]struct{}
}

var parked = parkedSet{on: make(map[*Endpoint]netio.Queued), yielded: make(map[*Endpoint]struct{})}

// yield notes that e's reader stopped spinning for a parked endpoint and
// is about to park.
func (p *parkedSet) yield(e *Endpoint) {
	if e.queued == nil || e.waker == nil {
		return
	}
	p.mu.Lock()
	p.yielded[e] = struct{}{}
	p.mu.Unlock()
}

// add notes that e's reader parks on its socket.
func (p *parkedSet) add(e *Endpoint) {
	if e.queued == nil {
		return
	}
	p.mu.Lock()
	p.on[e] = e.queued
	p.n.Store(int32(len(p.on)))
	p.mu.Unlock()
}

// remove notes that e's reader woke.
func (p *parkedSet) remove(e *Endpoint) {
	if e.queued == nil {
		return
	}
	p.mu.Lock()
	delete(p.on, e)
	for y := range p.yielded {
		if y != e {
			delete(p.on, y) // about to wake
			y.waker.Wake()
		}
	}
	clear(p.yielded)
	p.n.Store(int32(len(p.on)))
	p.mu.Unlock()
}

// maxProbes bounds the sockets one turn of a spinner asks (a system call
// each): a process of one processor with more parked endpoints (the
// shards of a socket, say) has a random few of them asked at each turn.
const maxProbes = 4

// othersQueued reports whether a packet waits for an endpoint other than
// e whose reader is parked, of up to maxProbes of them.
func (p *parkedSet) othersQueued(e *Endpoint) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	probes := 0
	for o, q := range p.on { // in random order
		if o == e {
			continue
		}
		if q.Queued() {
			return true
		}
		if probes++; probes == maxProbes {
			break
		}
	}
	return false
}
