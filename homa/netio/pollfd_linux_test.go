//go:build linux

package netio

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPollFDQuiet: datagrams that arrive while no reader parks (before
// the first one, and after one woke) leave the Conn's epoll instance (the
// only thing of the Conn in Go's netpoller) quiet, so that they wake no
// thread; a reader that parks arms it and wakes for the next datagram.
func TestPollFDQuiet(t *testing.T) {
	a := openUDP(t, lo4, 0, nil)
	b := openUDP(t, lo4, 0, nil).(*sockConn)
	epReady := func() bool {
		t.Helper()
		ready := false
		if err := b.pfd.epc.Control(func(ep uintptr) {
			pfd := []unix.PollFd{{Fd: int32(ep), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			ready = err == nil && n > 0
		}); err != nil {
			t.Fatal(err)
		}
		return ready
	}
	send := func(tag uint64) {
		t.Helper()
		writeAll(t, a, b.LocalAddr(), 0, testPacket(a.Port(), b.Port(), 100, tag))
	}
	pkts := makePackets(8, 2048)
	drain := func(want int) {
		t.Helper()
		got := 0
		for deadline := time.Now().Add(5 * time.Second); got < want && time.Now().Before(deadline); {
			n, err := b.TryReadBatch(pkts)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != want {
			t.Fatalf("read %d packets, want %d", got, want)
		}
	}

	// A fresh Conn's instance is quiet until a reader parks.
	send(0)
	if epReady() {
		t.Fatal("a datagram made a fresh Conn's epoll instance ready")
	}
	drain(1)

	// A reader parks (arming the registration) and the first datagram
	// wakes it.
	woke := make(chan error, 1)
	go func() { woke <- b.WaitReadable() }()
	time.Sleep(20 * time.Millisecond) // let it park
	send(1)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	drain(1)
	// Nobody parks now: five more datagrams, queued on the socket, leave
	// the instance quiet (loopback queues a datagram before the send
	// returns).
	for i := range 5 {
		send(uint64(2 + i))
	}
	if epReady() {
		t.Fatal("datagrams that came while no reader parked made the epoll instance ready")
	}
	drain(5)
	// The next reader to park re-arms it and wakes.
	go func() { woke <- b.WaitReadable() }()
	time.Sleep(20 * time.Millisecond)
	send(7)
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked reader did not wake for a datagram")
	}
	drain(1)
}

// TestPollFDRegistration: the socket is in its epoll instance only
// while a reader parks (so that the kernel runs no wake-up callback for
// the packets of a reader that spins), unless the Conn's readers park at
// every wait (Options.ParkOften), when it stays in.
func TestPollFDRegistration(t *testing.T) {
	for _, parkOften := range []bool{false, true} {
		a := openUDP(t, lo4, 0, nil)
		b := openUDP(t, lo4, 0, &Options{ParkOften: parkOften}).(*sockConn)
		// registered counts the descriptors in b's epoll instance, as
		// /proc lists them ("tfd:" lines).
		registered := func() int {
			t.Helper()
			n := 0
			if err := b.pfd.epc.Control(func(ep uintptr) {
				info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", ep))
				if err != nil {
					t.Fatal(err)
				}
				n = strings.Count(string(info), "\ntfd:")
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := registered(); n != 0 {
			t.Fatalf("ParkOften %v: a fresh Conn has %d registrations, want 0", parkOften, n)
		}
		pkts := makePackets(1, 2048)
		for round := range 2 {
			woke := make(chan error, 1)
			go func() { woke <- b.WaitReadable() }()
			for deadline := time.Now().Add(5 * time.Second); registered() == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("ParkOften %v, round %d: a parked reader left the socket unregistered", parkOften, round)
				}
				time.Sleep(time.Millisecond)
			}
			writeAll(t, a, b.LocalAddr(), 0, testPacket(a.Port(), b.Port(), 100, uint64(round)))
			if err := <-woke; err != nil {
				t.Fatal(err)
			}
			if n, err := b.TryReadBatch(pkts); n != 1 || err != nil {
				t.Fatalf("read %d packets, %v", n, err)
			}
			want := 0
			if parkOften {
				want = 1
			}
			if n := registered(); n != want {
				t.Errorf("ParkOften %v, round %d: %d registrations after the reader woke, want %d", parkOften, round, n, want)
			}
		}
	}
}

// TestPollFDRegistrationRefused: a reader whose registration the kernel
// refuses (fs.epoll.max_user_watches, memory) does not park, since
// nothing would wake it: its wait fails, and the Conn reads without
// waiting, with sleeps in between, until the datagram comes.
func TestPollFDRegistrationRefused(t *testing.T) {
	a := openUDP(t, lo4, 0, nil)
	b := openUDP(t, lo4, 0, nil).(*sockConn)
	var sleeps []time.Duration
	b.rd.sleep = func(d time.Duration) { sleeps = append(sleeps, d) }
	refused := 0
	b.pfd.arm = func(uintptr) {
		refused++
		b.pfd.armErr = os.NewSyscallError("epoll_ctl", unix.ENOSPC)
		if refused == 3 {
			writeAll(t, a, b.LocalAddr(), 0, testPacket(a.Port(), b.Port(), 100, 0x45))
		}
	}
	pkts := makePackets(4, 2048)
	n, err := b.ReadBatch(pkts)
	if err != nil || n != 1 || tagOf(pkts[0].Bytes()) != 0x45 {
		t.Fatalf("ReadBatch = %d, %v; want the packet", n, err)
	}
	if refused != 3 || len(sleeps) != 2 {
		t.Errorf("%d refused registrations, %d sleeps; want 3 and 2", refused, len(sleeps))
	}
}
