package sock_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/sock"
)

// tosSniffer keeps copies of the IPv4 Homa packets of the host (a raw
// socket for protocol 146 without a filter is handed every one), so that
// a test can see the TOS byte they went out with.
type tosSniffer struct {
	fd   int
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	// Filled by the reader goroutine; read after wg.Wait.
	pkts []sniffed
}

// sniffed is one packet seen: its Homa ports, class and TOS byte.
type sniffed struct {
	src, dst uint16
	class    string
	tos      uint8
}

// newTOSSniffer opens the raw socket. It is open before the test's
// traffic starts, so the kernel queues a copy of every packet of it from
// then on, whether or not the reader has started.
func newTOSSniffer(t *testing.T) *tosSniffer {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 146)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skipf("needs raw IP sockets (root or CAP_NET_RAW) to watch the TOS byte: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Room for the whole exchange, so that a reader starved of CPU loses
	// nothing: SO_RCVBUFFORCE goes past rmem_max (root), SO_RCVBUF is the
	// fallback.
	const rcvbuf = 16 << 20
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	tv := unix.Timeval{Usec: 20_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	s := &tosSniffer{fd: fd, stop: make(chan struct{})}
	t.Cleanup(s.close)
	return s
}

// close stops the reader, once it has read what is queued, and closes
// the socket. It may be called more than once.
func (s *tosSniffer) close() {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		unix.Close(s.fd)
	})
}

// start reads packets in a goroutine until finish.
func (s *tosSniffer) start() {
	s.wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-s.stop:
				// Everything already queued is read; nothing is waited for.
				for {
					n, _, err := unix.Recvfrom(s.fd, buf, unix.MSG_DONTWAIT)
					if err != nil {
						return
					}
					s.record(buf[:n])
				}
			default:
			}
			if n, _, err := unix.Recvfrom(s.fd, buf, 0); err == nil {
				s.record(buf[:n])
			}
		}
	})
}

// record classifies one IPv4 datagram.
func (s *tosSniffer) record(b []byte) {
	if len(b) < 20 {
		return
	}
	ihl := int(b[0]&0xf) * 4
	if len(b) < ihl+4 {
		return
	}
	homa := b[ihl:]
	var p wire.Packet
	if p.Parse(homa) != nil {
		return
	}
	class := "control"
	if p.Type == wire.TypeData {
		switch d := &p.Data; {
		case d.Retransmit != 0:
			// A retransmission takes the priority its RESEND asked
			// for; only a loaded host retransmits on loopback.
			class = "retransmitted"
		case d.MessageLength == 100:
			class = "short"
		case d.MessageLength == 10_000:
			class = "medium"
		case d.Offset() < d.Incoming:
			class = "long unscheduled"
		default:
			class = "granted"
		}
	}
	s.pkts = append(s.pkts, sniffed{
		src:   binary.BigEndian.Uint16(homa[0:]),
		dst:   binary.BigEndian.Uint16(homa[2:]),
		class: class,
		tos:   b[1],
	})
}

// finish closes the sniffer and returns the TOS bytes seen per class among the packets
// between Homa ports a and b, whichever way they went. Packets of other
// sockets (other tests, other processes) are left out.
func (s *tosSniffer) finish(a, b uint16) map[string]map[uint8]int {
	s.close()
	seen := map[string]map[uint8]int{}
	for _, p := range s.pkts {
		if !(p.src == a && p.dst == b || p.src == b && p.dst == a) {
			continue
		}
		if seen[p.class] == nil {
			seen[p.class] = map[uint8]int{}
		}
		seen[p.class][p.tos]++
	}
	return seen
}

// TestDSCPOnTheWire checks the TOS byte of real packets on loopback: the
// priority of each packet travels as DSCP class selector p (TOS p<<5).
// Control packets go at 7; unscheduled DATA at the level the receiver's
// cutoffs (here the Linux defaults) give its message length; granted DATA
// at the scheduled level its GRANT named (0 for a lone message).
//
// Every packet the test asserts on has reached its receiver's socket
// before the call that sent it returns, and the sniffer's socket gets its
// copy in the same delivery, so the result does not depend on timing;
// and only the packets between the test's two ports count.
func TestDSCPOnTheWire(t *testing.T) {
	sn := newTOSSniffer(t)
	server, client := openPair(t, "127.0.0.1", sock.Raw, 21400)
	sn.start()
	for _, n := range []int{100, 10_000, 200_000} {
		if err := call(t, client, server.LocalAddr(), payload(5, n)); err != nil {
			t.Fatal(err)
		}
	}
	seen := sn.finish(server.LocalAddr().Port(), client.LocalAddr().Port())
	want := map[string]uint8{"control": 7 << 5, "short": 7 << 5, "medium": 5 << 5, "long unscheduled": 4 << 5, "granted": 0}
	for _, class := range slices.Sorted(maps.Keys(want)) {
		tos := want[class]
		got := seen[class]
		if len(got) != 1 || got[tos] == 0 {
			t.Errorf("%s packets: TOS %v, want only %#x", class, fmtTOS(got), tos)
		}
	}
	if n := seen["retransmitted"]; len(n) > 0 {
		t.Logf("retransmitted DATA (not checked): TOS %v", fmtTOS(n))
	}
}

func fmtTOS(m map[uint8]int) string {
	s := ""
	for _, tos := range slices.Sorted(maps.Keys(m)) {
		s += fmt.Sprintf("%#x×%d ", tos, m[tos])
	}
	return s
}
