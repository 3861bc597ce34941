package sock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/sock"
)

// sniffTOS reads every Homa packet on the host (a raw IPv4 socket for
// protocol 146 without a filter sees them all) until stop closes, and
// returns the TOS bytes seen per packet class.
func sniffTOS(t *testing.T, stop <-chan struct{}) func() map[string]map[uint8]int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, 146)
	if err != nil {
		t.Skipf("raw sockets not permitted: %v", err)
	}
	tv := unix.Timeval{Usec: 20_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[uint8]int{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unix.Close(fd)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || n < 20 {
				continue
			}
			ihl := int(buf[0]&0xf) * 4
			var p wire.Packet
			if p.Parse(buf[ihl:n]) != nil {
				continue
			}
			class := "control"
			if p.Type == wire.TypeData {
				switch d := &p.Data; {
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
			if seen[class] == nil {
				seen[class] = map[uint8]int{}
			}
			seen[class][buf[1]]++
		}
	}()
	return func() map[string]map[uint8]int { wg.Wait(); return seen }
}

// TestDSCPOnTheWire checks the TOS byte of real packets on loopback: the
// priority of each packet travels as DSCP class selector p (TOS p<<5).
// Control packets go at 7; unscheduled DATA at the level the receiver's
// cutoffs (here the Linux defaults) give its message length; granted DATA
// at the scheduled level its GRANT named (0 for a lone message).
func TestDSCPOnTheWire(t *testing.T) {
	stop := make(chan struct{})
	result := sniffTOS(t, stop)
	server, client := openPair(t, "127.0.0.1", sock.Raw, 21400)
	time.Sleep(10 * time.Millisecond) // let the sniffer start reading
	for _, n := range []int{100, 10_000, 200_000} {
		if err := call(t, client, server.LocalAddr(), payload(5, n)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the last ACK and the sniffer's backlog
	close(stop)
	seen := result()
	want := map[string]uint8{"control": 7 << 5, "short": 7 << 5, "medium": 5 << 5, "long unscheduled": 4 << 5, "granted": 0}
	for class, tos := range want {
		got := seen[class]
		if len(got) != 1 || got[tos] == 0 {
			t.Errorf("%s packets: TOS %v, want only %#x", class, fmtTOS(got), tos)
		}
	}
}

func fmtTOS(m map[uint8]int) string {
	s := ""
	for tos, n := range m {
		s += fmt.Sprintf("%#x×%d ", tos, n)
	}
	return s
}
