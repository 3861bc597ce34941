package homa

import (
	"context"
	"errors"
	"net"
	"runtime"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/transport/mailbox"
)

// Receiving. One goroutine at a time reads the socket: whoever holds
// rxTok. A goroutine waiting in Recv takes it when it can and reads for
// itself, so that its own message reaches it with no hand-off between
// goroutines (each costs a thread wake-up, several microseconds; tens on
// a virtual machine): it spins on non-blocking reads for a while after
// each sign of activity (polling), then parks in the netpoller, as a
// goroutine reading a TCP socket does. It processes whatever comes,
// hands other goroutines their messages, and reads on until its own has
// come. While no goroutine in Recv reads, the background reader parks in
// the netpoller and processes what comes: grants, acknowledgments,
// requests nobody waits for yet.
//
// The path from a parked endpoint. An RPC that finds both ends idle
// should cost each a single thread wake-up, as a blocking read does:
// the server's goroutine in Recv, parked on the socket, wakes for the
// request; the client's, for the response. Three things kept the
// endpoint from that. The background reader took the socket after each
// RPC (its grace timer fired, a wake-up), and the next Recv had to take
// it back; now it leaves the socket alone while the endpoint is quiet
// (nothing in progress in the core, nobody waiting in Recv: see
// noteQuiet), so the next Recv finds it free. A goroutine in Recv that
// does take the socket from the parked background reader parks until
// the reader lets go (takeToken), instead of yielding its processor in
// a loop, which on two busy processors could keep the reader from
// running for a millisecond. And the acknowledgment of the response
// waited for a timer (the core's quiet.go: a client calling now and then
// now acknowledges at once), while deadlines that had gone kept the
// timer armed (settle re-arms or stops it). TestParkedPathWakeups counts
// each of these per RPC (contract.Stats: ReaderParks, ReaderSteals,
// Handoffs, TimerWakeupsVain).

// wait blocks the goroutine of waiter w until its message comes, ctx
// ends or the endpoint closes, reading the socket itself whenever it can
// take rxTok: at once when it is free, or from the background reader,
// which gives it up when woken (only the holder of rxTok ever parks on
// the socket, so a wake-up always reaches the goroutine that needs it).
// due says w waits for the response of an RPC it sent, whose request
// was request bytes long (see Polling).
func (e *Endpoint) wait(ctx context.Context, w *mailbox.Waiter, due bool, request int) (*contract.Message, error) {
	var stop func() bool // unregisters the wake-up on ctx, once registered
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	if ctx.Err() == nil && e.poller != nil {
		took, m, got := e.takeToken(ctx, w)
		if took {
			m, got = e.read(ctx, w, due, request, &stop)
		}
		if got {
			e.putWaiter(w)
			return mailbox.Received(m)
		}
	}
	// Someone else reads and hands the message over (or ctx ended, or
	// this reader could not park): if no goroutine in Recv reads, the
	// background reader, which may be waiting for the endpoint to stop
	// being quiet, must look again; and a reset of the timer left to
	// this caller is made now (see Lazy arming).
	e.applyLazy()
	if e.poller != nil && !e.appReading.Load() {
		e.pokeReader()
	}
	if due && ctx.Err() == nil && e.poller != nil {
		if m, ok := e.awaitTurn(ctx, w, request, &stop); ok {
			e.putWaiter(w)
			return mailbox.Received(m)
		}
	}
	m, err := e.mb.Await(ctx, &e.mu, w)
	e.putWaiter(w)
	return m, err
}

// awaitTurn waits for the response of w while another goroutine reads
// the socket, and takes the socket over when that one leaves (its own
// message came): the response then reaches w's goroutine with no
// hand-off, and does not wait for the background reader's grace.
// (A goroutine waiting for any message, a server's, leaves the socket
// to the goroutine that read last, which usually comes back soon.) It
// reports false, with w still registered, when ctx ended or the reader
// it became stepped aside (see read).
func (e *Endpoint) awaitTurn(ctx context.Context, w *mailbox.Waiter, request int, stop *func() bool) (*contract.Message, bool) {
	e.awaitingIDs.Add(1)
	for {
		if e.rxTok.TryLock() {
			e.awaitingIDs.Add(-1)
			return e.read(ctx, w, true, request, stop)
		}
		select {
		case m := <-w.C:
			e.awaitingIDs.Add(-1)
			return m, true
		case <-e.readTurn:
		case <-ctx.Done():
			e.awaitingIDs.Add(-1)
			return nil, false
		}
	}
}

// passTurn tells a goroutine in awaitTurn that the socket is free. The
// caller has just released rxTok: either a goroutine that registered in
// awaitTurn before then finds the token free, or this sees it.
func (e *Endpoint) passTurn() {
	if e.awaitingIDs.Load() > 0 {
		select {
		case e.readTurn <- struct{}{}:
		default:
		}
	}
}

// takeToken takes rxTok for the goroutine of w if it is free, or held by
// the background reader parked on the socket, which it wakes to give the
// token up. Meanwhile it parks too (spinning would keep the reader off
// its processor): the reader tells it through tokenFreed. It reports
// whether it took the token; if not, whether w's message came
// meanwhile (got, with m), or else another goroutine in Recv reads
// or ctx ended.
func (e *Endpoint) takeToken(ctx context.Context, w *mailbox.Waiter) (took bool, m *contract.Message, got bool) {
	if e.rxTok.TryLock() {
		return true, nil, false
	}
	if e.waker == nil || !e.rxParked.Load() {
		return false, nil, false
	}
	e.stealing.Add(1)
	defer e.stealing.Add(-1)
	e.io.steals.Add(1)
	e.waker.Wake()
	for {
		if e.rxTok.TryLock() {
			return true, nil, false
		}
		if e.appReading.Load() {
			return false, nil, false // another goroutine in Recv took it first
		}
		select {
		case <-e.tokenFreed:
		case m := <-w.C:
			return false, m, true
		case <-ctx.Done():
			return false, nil, false
		}
	}
}

// releaseToken releases rxTok: a goroutine parked in takeToken or
// awaitTurn learns of it. (One parked in takeToken while another took
// the token first waits for that one to leave, or for its message.)
func (e *Endpoint) releaseToken() {
	e.rxTok.Unlock()
	e.passTurn()
	if e.stealing.Load() > 0 {
		select {
		case e.tokenFreed <- struct{}{}:
		default:
		}
	}
}

// read is the reader's part of wait: the caller holds rxTok, and read
// releases it. It reports whether it received what was sent on w.C (a
// message, or nil when the endpoint closed); if not, ctx ended, or the
// Conn cannot be woken and the reader stepped aside after spinning.
func (e *Endpoint) read(ctx context.Context, w *mailbox.Waiter, due bool, request int, stop *func() bool) (*contract.Message, bool) {
	e.appReading.Store(true)
	e.disarmGrace()
	b := e.getBatch()
	defer func() {
		e.putBatch(b)
		e.lastRead.Store(int64(e.rxNow)) // the last clock reading of a reader: close enough for readerGrace
		e.appReading.Store(false)
		e.releaseToken()
		e.applyLazy()
		if e.rxIdle.Load() && !e.quiet.Load() {
			e.armGrace(readerGrace)
		}
	}()
	for {
		if m, ok := e.spinRead(ctx, w, due, request, b); ok {
			return m, true
		}
		if ctx.Err() != nil || e.isClosed() || e.waker == nil {
			return nil, false
		}
		// Park in the netpoller. A message handed to w meanwhile by
		// another goroutine (a timeout, Abort) wakes us: settle sees
		// rxBlocked, under mu.
		e.mu.Lock()
		if len(w.C) > 0 {
			e.mu.Unlock()
			return <-w.C, true
		}
		e.rxBlocked = w
		e.mu.Unlock()
		if *stop == nil && ctx.Done() != nil {
			*stop = context.AfterFunc(ctx, e.waker.Wake)
		}
		e.idle(b)
		e.allocRx()
		e.applyLazy() // nobody spins now (see Lazy arming)
		e.io.parks.Add(1)
		if e.rxYield {
			e.rxYield = false
			parked.yield(e)
		}
		parked.add(e)
		n, err := e.readConn(e.rxPkts)
		parked.remove(e)
		e.mu.Lock()
		e.rxBlocked = nil
		e.mu.Unlock()
		if n > 0 {
			e.process(e.rxPkts[:n], e.now(), b, w)
		}
		select {
		case m := <-w.C:
			return m, true
		default:
		}
		switch {
		case err == nil, errors.Is(err, netio.ErrWoken):
		case errors.Is(err, net.ErrClosed) || e.isClosed():
			return nil, false
		default:
			e.io.readErrors.Add(1)
		}
	}
}

// spinRead reads without parking for the spin budget after each sign of
// activity, and reports whether w got its message meanwhile. On a kernel
// socket it yields the processor only once in a while (so that timers
// and goroutines readied on it still run): a goroutine that yields goes
// to the global run queue, an idle processor wakes up to run it, and
// then no thread is left parked in the netpoller, so a goroutine parked
// on a socket (the other end of an RPC in this process, or the client
// whose response this one just sent) waits for the runtime's periodic
// network poll instead of the packet. On the in-memory network, whose
// packets goroutines of this process deliver, it yields at every turn.
func (e *Endpoint) spinRead(ctx context.Context, w *mailbox.Waiter, due bool, request int, b *txBatch) (*contract.Message, bool) {
	budget := e.spin.budget(due, request)
	acks := false // spinning only for acknowledgments (see Awaiting acknowledgments)
	if budget <= 0 && !due && e.spin.mode == PollAdaptive && e.ackWait.Load() {
		budget, acks = e.spin.max, true
		e.ackSpins.Add(1)
	}
	if budget <= 0 {
		return nil, false
	}
	start := e.now()
	deadline, quiet := start+budget, start
	var turn uint32
	for {
		select {
		case m := <-w.C:
			return m, true
		default:
		}
		e.allocRx()
		n, err := e.tryRead(e.rxPkts)
		switch {
		case n > 0:
			now := e.now()
			e.process(e.rxPkts[:n], now, b, w)
			if acks && !e.ackWait.Load() {
				e.ackCaught.Add(1)
				return nil, false // acknowledged (a request would have come on w.C)
			}
			deadline, quiet = now+budget, now
			if e.yieldDue(now) {
				runtime.Gosched()
			}
			continue
		case err != nil && (errors.Is(err, net.ErrClosed) || e.isClosed()):
			return nil, false
		case ctx.Err() != nil:
			return nil, false
		}
		if e.spin.oneProc && parked.n.Load() > 0 && parked.othersQueued(e) {
			e.spinsCut.Add(1)
			e.rxYield = true
			return nil, false // see One processor
		}
		now := e.now()
		if now > deadline {
			return nil, false
		}
		if at := e.dueAt.Load(); at != 0 && now >= time.Duration(at) {
			e.runDue(now, b)
		}
		e.idle(b)
		if turn++; turn%e.spin.yieldEvery == 0 {
			e.rxYielded = now
			runtime.Gosched()
		}
		if e.spin.yieldCPU && (acks && (turn == 1 || turn%yieldRarely == 0) ||
			turn%yieldRarely == 0 && now-quiet >= e.spin.max) {
			e.cpuYields.Add(1)
			yieldCPU()
		}
	}
}

// busyYield is the longest a reader that keeps finding packets goes
// without yielding its processor. Without it a reader whose packets keep
// coming (a client with many RPCs in flight, back in Recv as soon as it
// has sent the next request; the background reader working through a
// backlog) would yield only when the runtime preempts it, after 10 ms,
// and hold up the other goroutines of its processor as long: with 4
// endpoints keeping 32 RPCs each in flight on 2 processors, 1% of the
// RPCs took 7.5-8.0 ms, against 5.5-5.8 ms with it (median 125-128 µs
// against 290-305: the RPCs share the processors more evenly), at the
// same rate.
const busyYield = 100 * time.Microsecond

// yieldDue reports whether the holder of rxTok, which processed packets
// at now, has gone busyYield without yielding its processor; if so it
// takes the yield as done.
func (e *Endpoint) yieldDue(now time.Duration) bool {
	if now-e.rxYielded < busyYield {
		return false
	}
	e.rxYielded = now
	return true
}

// rxLoop reads and dispatches packets until the Conn closes, whenever no
// goroutine in Recv reads. It holds rxTok while it parks in WaitReadable,
// so that it is the only goroutine parked on the socket; a goroutine in
// Recv that wants to read wakes it, and it gives the token up. It takes
// the socket back only after goroutines in Recv have left it alone for
// readerGrace: the next Recv usually follows soon, and then finds the
// socket free rather than having to wake this goroutine (a thread
// wake-up) to take it. Without a Poller it parks in ReadBatch.
func (e *Endpoint) rxLoop() {
	defer e.wg.Done()
	b := &txBatch{}
	for {
		var err error
		if e.poller != nil {
			if !e.awaitReaders() {
				return
			}
			if !e.rxTok.TryLock() {
				runtime.Gosched()
				continue
			}
			if e.readerWait() > 0 || e.isClosed() {
				e.releaseToken()
				if e.isClosed() {
					return
				}
				continue
			}
			e.idle(b)
			e.applyLazy()
			e.rxParked.Store(true)
			e.io.parks.Add(1)
			parked.add(e)
			err = e.poller.WaitReadable()
			parked.remove(e)
			e.rxParked.Store(false)
			switch {
			case errors.Is(err, netio.ErrWoken):
				err = nil
				e.releaseToken()
			case err != nil:
				e.releaseToken()
			default:
				err = e.readBatch(b, nil, e.tryRead)
			}
		} else {
			e.rxTok.Lock()
			e.idle(b)
			err = e.readBatch(b, nil, e.readConn)
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || e.isClosed() {
				return
			}
			e.io.readErrors.Add(1)
		}
	}
}

// awaitReaders waits until the goroutines in Recv have left the socket
// alone for readerGrace. It does not poll: the grace timer tells it,
// armed by the last goroutine to stop reading, or here when none reads
// (one reading may park on the socket for as long as no request comes,
// and then nothing wakes). It reports false when the endpoint closed.
// rxIdle and appReading are each written before the other is read, so
// either a goroutine that stops reading sees rxIdle and arms the timer,
// or this sees it gone.
func (e *Endpoint) awaitReaders() bool {
	if e.readerWait() <= 0 && !e.quiet.Load() {
		return true
	}
	e.rxIdle.Store(true)
	defer e.rxIdle.Store(false)
	for {
		wait, quiet := e.readerWait(), e.quiet.Load()
		if wait <= 0 && !quiet {
			return true
		}
		if !quiet && !e.appReading.Load() {
			e.armGrace(max(wait, 0))
		}
		select {
		case <-e.readerLeft:
		case <-e.done:
			return false
		}
	}
}

// pokeReader makes the background reader, waiting in awaitReaders,
// look again at whether it should read.
func (e *Endpoint) pokeReader() {
	select {
	case e.readerLeft <- struct{}{}:
	default:
	}
}

// armGrace arms the grace timer to fire in d, unless it is armed.
func (e *Endpoint) armGrace(d time.Duration) {
	if !e.graceArmed.Load() && !e.graceArmed.Swap(true) {
		e.graceArms.Add(1)
		e.io.timerArms.Add(1)
		e.grace.Reset(d)
	}
}

// disarmGrace stops the grace timer, if armed, when a goroutine starts
// reading: the timer then fires only once the socket has been left alone
// for readerGrace, not every readerGrace while goroutines come and go.
// Each firing is a thread wake-up, which on a machine whose processors
// are all busy spinning takes one from a spinner, maybe in the middle
// of an RPC.
func (e *Endpoint) disarmGrace() {
	if e.graceArmed.Load() && e.grace.Stop() {
		e.graceArmed.Store(false)
	}
}

// graceEnded runs when the grace timer fires: it tells the background
// reader that the goroutines in Recv have left the socket alone for
// readerGrace, or re-arms the timer for the rest of it. While one reads,
// it leaves the timer to be armed when that one stops. A goroutine that
// starts reading stops it (disarmGrace), so it fires only when the
// socket was left alone for readerGrace: never on an idle endpoint, nor
// on a busy one whose goroutines keep coming back sooner.
func (e *Endpoint) graceEnded() {
	e.readerWakeups.Add(1)
	e.graceArmed.Store(false)
	if e.appReading.Load() || e.isClosed() {
		return // a firing that Close's Stop came too late for arms no other
	}
	if wait := e.readerWait(); wait > 0 {
		e.armGrace(wait)
		return
	}
	e.pokeReader()
}

// readerGrace is how long the background reader leaves the socket to
// the goroutines in Recv after one of them stopped reading.
const readerGrace = 500 * time.Microsecond

// readerWait returns how long the background reader should wait before
// it takes the socket: while a goroutine in Recv reads (or is taking the
// socket from it), and for readerGrace after one stopped.
func (e *Endpoint) readerWait() time.Duration {
	if e.appReading.Load() || e.stealing.Load() > 0 {
		return readerGrace
	}
	return time.Duration(e.lastRead.Load()) + readerGrace - e.now()
}

// readBatch reads with read and processes what came, on behalf of the
// waiter self (nil for the background reader). The caller holds rxTok;
// readBatch releases it.
func (e *Endpoint) readBatch(b *txBatch, self *mailbox.Waiter, read readFunc) error {
	e.allocRx()
	n, err := read(e.rxPkts)
	yield := false
	if n > 0 {
		now := e.now()
		e.process(e.rxPkts[:n], now, b, self)
		yield = e.yieldDue(now)
	}
	e.releaseToken()
	if yield {
		runtime.Gosched()
	}
	return err
}

// readFunc reads a batch of packets (netio.Conn.ReadBatch and its kin).
type readFunc func([]netio.Packet) (int, error)

// chooseReads picks how the endpoint reads its Conn. A Conn with UDP GRO
// lands datagrams in a receive area of its own; reading them borrowed
// spares copying each packet into the endpoint's buffers (the core
// copies them into message storage instead, where otherwise it could
// keep a buffer of one large packet). Other Conns read straight into the
// endpoint's buffers, which the core keeps as message storage where it
// pays, and, where the Conn can, put the payloads of the packets the
// core expects straight into their messages (core.Lend).
func (e *Endpoint) chooseReads() {
	e.readConn, e.rxOwn = e.conn.ReadBatch, true
	if e.poller != nil {
		e.tryRead = e.poller.TryReadBatch
	}
	br, ok := e.conn.(netio.BorrowReader)
	sc, _ := e.conn.(netio.StatsConn)
	if !ok || sc == nil || !sc.Stats().GRO {
		if l, ok := e.conn.(netio.Lander); ok && l.Lands() {
			e.lands, e.lent = true, make([][]byte, rxBatch)
		}
		return
	}
	e.readConn, e.rxOwn = br.ReadBorrowed, false
	if e.poller != nil {
		e.tryRead = br.TryReadBorrowed
	}
}

// rxBufSize is the size of each receive buffer: the largest IP packet.
const rxBufSize = 1 << 16

// allocRx gives the receive batch its buffers, on first use (so that an
// endpoint that never reads holds none), and replaces those the core
// kept as message storage. They come from the buffer pool, and go back
// to it with the messages. Borrowed reads need none. The caller holds
// rxTok.
func (e *Endpoint) allocRx() {
	if !e.rxOwn {
		return
	}
	for i := range e.rxPkts {
		if e.rxPkts[i].Buf == nil {
			e.rxPkts[i].Buf = getBuf(rxBufSize)
		}
	}
}

func (e *Endpoint) isClosed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// process hands a batch of received packets, read at now, to the core
// under one lock, then sends what they caused. self is the waiter of the calling
// goroutine, if it reads from Recv.
func (e *Endpoint) process(pkts []netio.Packet, now time.Duration, b *txBatch, self *mailbox.Waiter) {
	e.rxNow = now
	in := e.rxIn[:0]
	for i := range pkts {
		p := &pkts[i]
		in = append(in, core.Inbound{Buf: p.Bytes(), Land: p.Land[:p.Landed], Addr: p.Addr, Unreachable: unreachability(p.Unreachable), Own: e.rxOwn})
	}
	e.mu.Lock()
	if !e.closed {
		e.behind = len(pkts) == len(e.rxPkts)
		e.rxSelf = self
		e.core.HandleBatch(in, now, &e.out)
		e.settle(b)
		e.rxSelf = nil
		if e.lands {
			e.lend()
		}
	}
	e.mu.Unlock()
	for i := range in {
		if in[i].Buf == nil {
			pkts[i].Buf = nil // kept by the core: allocRx replaces it
		}
	}
	clear(in)
	if self != nil && len(self.C) > 0 && onlyAcks(b) {
		// The reader's own message came, and all the batch says is
		// acknowledgments: ackLoop sends them, off its way back.
		ab := e.getBatch()
		ab.pkts, b.pkts = b.pkts, ab.pkts
		ab.holds, b.holds = b.holds, ab.holds
		ab.rearm, ab.grace, b.rearm, b.grace = b.rearm, b.grace, false, false
		select {
		case e.acks <- ab:
			e.acksLeft.Add(1)
			return
		default:
			b.pkts, ab.pkts = ab.pkts, b.pkts
			b.holds, ab.holds = ab.holds, b.holds
			b.rearm, b.grace = ab.rearm, ab.grace
			e.putBatch(ab)
		}
	}
	e.flush(b)
}

// onlyAcks reports whether b holds packets, all ACKs.
func onlyAcks(b *txBatch) bool {
	for i := range b.pkts {
		if t, err := wire.PeekType(b.pkts[i].Bytes()); err != nil || t != wire.TypeAck {
			return false
		}
	}
	return len(b.pkts) > 0
}

// ackLoop sends the acknowledgments readers left to it. Those still
// waiting when the endpoint closes are dropped (acknowledgments are not
// reliable: servers ask again with NEED_ACK).
func (e *Endpoint) ackLoop() {
	defer e.wg.Done()
	for {
		select {
		case b := <-e.acks:
			e.sendBatch(b)
		case <-e.done:
			for {
				select {
				case b := <-e.acks:
					b.release()
					e.putBatch(b)
				default:
					return
				}
			}
		}
	}
}

// lend points the next read's packets at where the core expects their
// payloads (core.Lend): the first packets at the regions lent, in turn,
// the others nowhere. The caller holds mu and rxTok.
func (e *Endpoint) lend() {
	n := e.core.Lend(e.lent)
	for i := range e.rxPkts {
		p := &e.rxPkts[i]
		p.Land, p.Landed = nil, 0
		if i < n {
			p.Land = e.lent[i]
		}
	}
	clear(e.lent[:n])
}

// idle lets the core do the work it put off the path of messages (see
// core.Idle), if there is any: called when the endpoint has nothing to
// read.
func (e *Endpoint) idle(b *txBatch) {
	if !e.idleWork.Load() {
		return
	}
	e.mu.Lock()
	if !e.closed {
		e.core.Idle(e.now(), &e.out)
		e.settle(b)
	}
	e.mu.Unlock()
	e.flush(b)
}

// unreachability maps netio's reports of undelivered packets to the
// core's (0: an ordinary packet).
func unreachability(u netio.Unreachable) core.Unreachability {
	switch u {
	case netio.NotUnreachable:
		return 0
	case netio.UnreachablePort:
		return core.PortUnreachable
	case netio.UnreachableProtocol:
		return core.ProtocolUnreachable
	}
	return core.HostUnreachable
}
