//go:build linux

package netio

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollFD is a socket kept out of the runtime's netpoller, used through
// the syscall.RawConn interface as a net.PacketConn's would be.
//
// A socket the netpoller knows is registered edge-triggered: every
// datagram that arrives wakes whichever thread of the process is parked
// in epoll_wait, to find that nobody waits for it, while a goroutine
// spinning on the socket reads the datagram anyway. On a busy machine
// that thread takes a CPU from the spinners: one wasted thread wake-up
// per packet. So the socket is registered, one-shot, in an epoll
// instance of its own, and that instance with the netpoller: a reader
// about to park registers the socket, parks in the netpoller (its
// goroutine, not its thread), and the first datagram wakes it;
// datagrams that come while nobody parks wake nothing. The reader takes
// the registration out again once it wakes: while it is in, every
// datagram queued on the socket, and every sent one the kernel frees,
// runs the registration's wake-up callback under the socket's wait-queue
// lock, even disarmed (3-4% of the CPU of both processes with 4 x 32
// small RPCs in flight); with none, the kernel sees no sleeper and
// skips it. A Conn whose readers park at every wait (Options.ParkOften)
// leaves the registration in, saving two system calls per wait.
type pollFD struct {
	fd  int             // the socket
	ep  *os.File        // the epoll instance holding fd, in the netpoller
	epc syscall.RawConn // ep's
	// mu is held shared around every use of fd and exclusively to close
	// it, so that no system call reaches a closed (or reused) descriptor.
	mu     sync.RWMutex
	closed atomic.Bool
	// stayRegistered leaves the socket registered in ep between waits
	// (Options.ParkOften).
	stayRegistered bool
	// waitMu admits one wait at a time (ep's read lock admits one to the
	// netpoller already; this covers the arming and disarming too).
	waitMu sync.Mutex
	// The state of waits, under waitMu:
	// inEp says the socket is in ep; clean says that ep holds no event
	// (none since the last harvest), so that arming it gives the
	// netpoller an edge should the socket be ready, and a wait can park
	// without first harvesting; armed says the wait has armed.
	inEp, clean, armed bool
	// onErr, if set, learns that a wait ended on an error of the socket
	// (EPOLLERR: a pending error, or a message on its error queue).
	onErr   func()
	armErr  error              // the last registration's failure
	events  [1]unix.EpollEvent // Read's harvest of ep
	oneShot unix.EpollEvent    // the registration of fd in ep (read-only)
	// The functions of waits, bound once.
	arm, disarm     func(fd uintptr)
	harvest         func(fd uintptr) bool
	waitIn, waitOut func() error
}

// newPollFD takes the socket of rc out of the runtime's hands: it keeps
// a duplicate of the descriptor, in an epoll instance of its own. The
// caller closes the original (the runtime unregisters it then).
func newPollFD(rc syscall.RawConn) (*pollFD, error) {
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Not registered yet: only a reader about to park registers it.
	// Non-blocking, os.NewFile hands the instance to the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(fd)
		unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p := &pollFD{fd: fd, ep: os.NewFile(uintptr(epfd), "homa-epoll"), clean: true}
	p.oneShot = unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(fd)}
	if p.epc, err = p.ep.SyscallConn(); err != nil {
		p.ep.Close()
		unix.Close(fd)
		return nil, err
	}
	p.arm, p.disarm, p.harvest = p.register, p.unregister, p.harvestEvents
	p.waitIn, p.waitOut = p.waitReadable, p.waitWritable
	return p, nil
}

// Control implements syscall.RawConn.
func (p *pollFD) Control(f func(fd uintptr)) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return errSockClosed
	}
	f(uintptr(p.fd))
	return nil
}

// Read implements syscall.RawConn: it calls f until f returns true,
// parking in the netpoller in between until the socket is readable (or
// has an error). A read deadline on ep (Wake) ends the wait with
// os.ErrDeadlineExceeded.
func (p *pollFD) Read(f func(fd uintptr) bool) error { return p.until(f, p.waitIn) }

// Write implements syscall.RawConn: it calls f until f returns true,
// polling for room in the send buffer in between (rare: the buffer is
// large, and a full one drains within microseconds on a live link).
func (p *pollFD) Write(f func(fd uintptr) bool) error { return p.until(f, p.waitOut) }

// until calls f until it returns true, with wait in between.
func (p *pollFD) until(f func(fd uintptr) bool, wait func() error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for {
		if p.closed.Load() {
			return errSockClosed
		}
		if f(uintptr(p.fd)) {
			return nil
		}
		if err := wait(); err != nil {
			if p.closed.Load() {
				return errSockClosed
			}
			return err
		}
	}
}

// waitReadable parks until the socket is readable. Registering after a
// read found nothing loses no datagram: one that came in between makes
// the registration ready at once. A wait costs three system calls beyond
// the reads (arm, the harvest after the wake-up, disarm), two when the
// registration stays. The arming is the first step of ep's Read (which
// forgets readiness the netpoller reported before it began); when ep
// held no event before, no harvest follows it, since a socket ready by
// then made ep ready, and the netpoller hears of it.
func (p *pollFD) waitReadable() error {
	p.waitMu.Lock()
	defer p.waitMu.Unlock()
	p.armed = false
	err := p.epc.Read(p.harvest)
	_ = p.epc.Control(p.disarm) // fails only once ep is closed, which took the registration with it
	if err == nil && p.armErr != nil {
		return p.armErr // parking would wait for a wake-up that cannot come
	}
	return err
}

// readable reports whether a datagram (or an error) waits on the socket,
// without taking it: one ppoll with no timeout.
func (p *pollFD) readable() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return false
	}
	pfd := unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN}
	var ts unix.Timespec
	n, _, errno := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return errno == 0 && n > 0 && pfd.Revents != 0
}

// waitWritable waits, at most writePoll, for room in the send buffer.
func (p *pollFD) waitWritable() error {
	pfd := unix.PollFd{Fd: int32(p.fd), Events: unix.POLLOUT}
	ts := unix.NsecToTimespec(int64(writePoll))
	_, _, _ = unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return nil
}

// register puts the one-shot registration of the socket in ep (or
// re-arms it, should a wait have left it in), and sets armErr to what
// failed: the kernel may refuse a registration (fs.epoll.max_user_watches,
// memory), and the wait then fails rather than park.
func (p *pollFD) register(ep uintptr) {
	var err error
	if p.inEp {
		err = p.ctl(ep, unix.EPOLL_CTL_MOD, &p.oneShot)
	} else {
		err = p.ctl(ep, unix.EPOLL_CTL_ADD, &p.oneShot)
		if err == unix.EEXIST {
			err = p.ctl(ep, unix.EPOLL_CTL_MOD, &p.oneShot)
		}
	}
	p.armErr = nil
	p.inEp = err == nil
	if err != nil {
		p.armErr = os.NewSyscallError("epoll_ctl", err)
	}
}

// unregister takes the socket's registration out of ep, unless it
// stays.
func (p *pollFD) unregister(ep uintptr) {
	if !p.stayRegistered {
		_ = p.ctl(ep, unix.EPOLL_CTL_DEL, nil)
		p.inEp = false
	}
}

// ctl is epoll_ctl on ep for the socket. Like every system call on a
// wait's path that cannot block, it is raw: entering a system call the
// scheduler hears of wakes the runtime's monitor thread (sysmon) when it
// sleeps, as it does on an idle process: a thread wake-up per call.
func (p *pollFD) ctl(ep uintptr, op int, ev *unix.EpollEvent) error {
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, ep, uintptr(op), uintptr(p.fd), uintptr(unsafe.Pointer(ev)), 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// harvestEvents arms the registration at a wait's first call, then
// takes ep's ready event, if any, so that ep is idle again until the
// registration is re-armed. It reports whether the wait is over.
func (p *pollFD) harvestEvents(ep uintptr) bool {
	if !p.armed {
		p.armed = true
		p.arm(ep)
		if p.armErr != nil {
			return true
		}
		if p.clean {
			p.clean = false
			return false
		}
	}
	p.clean = false
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, ep, uintptr(unsafe.Pointer(&p.events[0])), 1, 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return true
		}
		p.clean = true // one registration: ep is empty now
		if n > 0 && p.events[0].Events&unix.EPOLLERR != 0 && p.onErr != nil {
			p.onErr()
		}
		return n > 0
	}
}

// writePoll bounds one wait for room in the send buffer, so that a
// writer notices Close.
const writePoll = time.Millisecond

// SetReadDeadline sets the deadline of waits in Read (Wake uses it).
func (p *pollFD) SetReadDeadline(t time.Time) error { return p.ep.SetReadDeadline(t) }

// Close closes the socket once no system call uses it. Closing ep first
// ends a wait in Read.
func (p *pollFD) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.ep.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return unix.Close(p.fd)
}
