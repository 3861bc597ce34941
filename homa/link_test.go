package homa_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/pacer"
)

// TestSharedLinkConcurrent: sharers on their own goroutines, at one
// instant (the link cannot drain), send until the link refuses them.
// Every packet sent has its time on the link's account, and the account
// passes MaxQueue by at most what the sharers racing to take their last
// slice added. Run it with -race.
func TestSharedLinkConcurrent(t *testing.T) {
	const sharers, size, rate = 4, 1500, 10_000 // 1.2 µs a packet
	link := homa.NewSharedLink(sharers)
	var wg sync.WaitGroup
	sent := make([]int, sharers)
	for k := range sharers {
		wg.Go(func() {
			p := pacer.New(pacer.Config{RateMbps: rate, Link: link.Shard(k)})
			p.Ready(1, 1<<30, 1)
			for p.Next(); ; p.Update(1, 1<<30) {
				if ok, _ := p.Admit(size, 0); !ok {
					return
				}
				p.Sent(size, 0)
				sent[k]++
			}
		})
	}
	wg.Wait()
	busy := link.Shard(0).Busy()
	packets := 0
	for _, n := range sent {
		packets += n
	}
	slice := pacer.DefaultMaxQueue.Nanoseconds() / 4
	t.Logf("%d packets sent, %v on the link's account", packets, time.Duration(busy))
	if tx := int64(packets) * size * 8000 / rate; tx > busy {
		t.Errorf("%d packets take %v of the link, more than its account holds (%v)", packets, time.Duration(tx), time.Duration(busy))
	}
	if over := busy - pacer.DefaultMaxQueue.Nanoseconds(); over > sharers*slice {
		t.Errorf("the account holds %v, %v past MaxQueue", time.Duration(busy), time.Duration(over))
	}
	if packets < int(pacer.DefaultMaxQueue.Nanoseconds()*rate/(size*8000))-sharers {
		t.Errorf("only %d packets filled a link of %v", packets, pacer.DefaultMaxQueue)
	}
}

// BenchmarkSharedLink: sharers sending 100-byte packets through one
// link of 100 Gbit/s as fast as they can, each on its own goroutine,
// taking the link's time a packet at a time or in slices. The figure
// is the cost of the shared words: writes/packet, and what they cost
// a packet when the sharers run on different cores.
//
//	go test -run '^$' -bench SharedLink -cpu 1,2 ./homa
func BenchmarkSharedLink(b *testing.B) {
	for _, c := range []struct {
		name  string
		slice time.Duration
	}{{"per-packet", -1}, {"slices", 0}} {
		b.Run(c.name, func(b *testing.B) {
			const size, rate = 100, 100_000
			n := 0
			link := homa.NewSharedLink(runtime.GOMAXPROCS(0)) // RunParallel's goroutines
			var mu sync.Mutex
			var writes uint64
			epoch := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				mu.Lock()
				k := n
				n++
				mu.Unlock()
				p := pacer.New(pacer.Config{RateMbps: rate, Link: link.Shard(k), LinkSlice: c.slice})
				p.Ready(1, 1<<30, 1)
				p.Next()
				for pb.Next() {
					now := time.Since(epoch).Nanoseconds()
					if ok, _ := p.Admit(size, now); ok {
						p.Sent(size, now)
					}
				}
				s := p.Stats()
				mu.Lock()
				writes += s.Slices + s.LinkAdds + s.Returns
				mu.Unlock()
			})
			b.ReportMetric(float64(writes)/float64(b.N), "writes/packet")
		})
	}
}
