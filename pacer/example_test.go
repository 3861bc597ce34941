package pacer_test

import (
	"fmt"
	"time"

	"github.com/homa-go/homa/pacer"
)

// An engine's transmit loop at 10 Gbit/s with made-up times: a short
// message queued after a long one goes first, and once 5 µs of transmit
// time is below, the next packet has to wait.
func Example() {
	p := pacer.New(pacer.Config{RateMbps: 10_000, MaxQueue: 5 * time.Microsecond})
	left := map[pacer.ID]int{1: 100_000, 2: 3_000} // bytes left per message
	p.Ready(1, 100_000, 1)                         // an old long message
	p.Ready(2, 3_000, 2)                           // a newer short one
	var now int64
	for range 6 {
		id, ok := p.Next()
		if !ok {
			break
		}
		n := min(1500, left[id])
		if ok, wait := p.Admit(n, now); !ok {
			fmt.Printf("t=%dns: wait %v\n", now, wait)
			now += int64(wait)
			continue
		}
		p.Sent(n, now)
		left[id] -= n
		if left[id] == 0 {
			p.Idle(id)
		} else {
			p.Update(id, uint32(left[id]))
		}
		fmt.Printf("t=%dns: %d bytes of message %d, %v outstanding\n", now, n, id, p.Outstanding(now))
	}
	// Output:
	// t=0ns: 1500 bytes of message 2, 1.2µs outstanding
	// t=0ns: 1500 bytes of message 2, 2.4µs outstanding
	// t=0ns: 1500 bytes of message 1, 3.6µs outstanding
	// t=0ns: 1500 bytes of message 1, 4.8µs outstanding
	// t=0ns: wait 1µs
	// t=1000ns: 1500 bytes of message 1, 5µs outstanding
}
