package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// The flooding scenarios: forged first DATA packets, each claiming a
// whole 1,000,000-byte message and carrying 1,400 bytes of it, from one
// source (claims), from many sources beside a real client (sources), and
// from more sources than the peer table holds (peers).

const (
	// claimPayload is the payload of each forged first DATA packet.
	claimPayload = 1400
	// perPeerShare is the receive memory one host may hold on the
	// server: the engine's default, RecvMemory (64 MiB) / 4. homa serve
	// has no flag to change it.
	perPeerShare = 16 << 20
	// rssBound bounds how much the server's resident memory may grow
	// over its baseline during a flood.
	rssBound = 256 << 20
	// rpcTimeout bounds each real RPC: generous, as the machine may be
	// loaded; an RPC that takes longer fails the scenario.
	rpcTimeout = 10 * time.Second
	// settleTime bounds the wait for the server to take in a flood.
	settleTime = 15 * time.Second
	// Forged address blocks, one /16 per scenario (see forged).
	blockClaims  = 66
	blockSources = 67
	blockPeers   = 68
)

// pacer spaces a flood's packets to a rate (0: as fast as the socket
// takes them), sleeping every 32 packets.
type pacer struct {
	rate  int
	start time.Time
	n     int
}

func newPacer(rate int) *pacer { return &pacer{rate: rate, start: time.Now()} }

func (p *pacer) wait(ctx context.Context) error {
	p.n++
	if p.rate <= 0 || p.n%32 != 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(p.n) / float64(p.rate) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return ctx.Err()
}

// flood sends one claim per (source, id) pair: sources addresses of the
// block, perSource claims each, source after source.
func flood(ctx context.Context, snd *sender, dst netip.AddrPort, block byte, sources, perSource, rate int) error {
	p := newPacer(rate)
	for s := range sources {
		src := forged(block, s)
		for k := range perSource {
			pkt := claim(dst.Port(), uint64(2+2*k), wire.MaxMessageLength, claimPayload)
			if err := snd.send(src, dst.Addr(), pkt); err != nil {
				return err
			}
			if err := p.wait(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// attackRig is what a scenario holds: the server, the forging socket
// and the capture socket standing in for the forged hosts (keeping what
// the server sends them if keep). close releases all of it.
type attackRig struct {
	srv *server
	snd *sender
	cap *capture
}

func openRig(ctx context.Context, o *options, keep bool, extra ...string) (*attackRig, error) {
	srv, err := startServer(ctx, o.homa, extra...)
	if err != nil {
		return nil, err
	}
	r := &attackRig{srv: srv}
	if r.snd, err = openSender(); err != nil {
		r.close()
		return nil, err
	}
	if r.cap, err = openCapture(keep); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// aftermath says what a flood cost besides memory, from scrapes before
// and after it: what the server sent (to the forged hosts, and to a
// real client if there was one) and what the kernel dropped at its
// socket, which the engine never saw.
func (r *attackRig) aftermath(before, after metricSet) string {
	drops, err := r.srv.kernelDrops()
	k := fmt.Sprint(drops)
	if err != nil {
		k = "unknown (" + err.Error() + ")"
	}
	var pkts, bytes float64
	byType := make(map[wire.Type]int)
	for t := wire.TypeData; t <= wire.TypeAck; t++ {
		l := fmt.Sprintf("type=%q", strings.ToLower(t.String()))
		n := after.get("homa_packets_sent_total", l) - before.get("homa_packets_sent_total", l)
		pkts += n
		bytes += after.get("homa_packet_bytes_sent_total", l) - before.get("homa_packet_bytes_sent_total", l)
		byType[t] = int(n)
	}
	cpu := after.get("process_cpu_seconds_total") - before.get("process_cpu_seconds_total")
	return fmt.Sprintf("server sent %.0f packets, %.0f B with IP headers (%s), used %.2f s of CPU; kernel dropped %s at the server's socket",
		pkts, bytes+ipv4HeaderLen*pkts, typeCounts(byType), cpu, k)
}

func (r *attackRig) close() {
	if r.cap != nil {
		r.cap.close()
	}
	if r.snd != nil {
		r.snd.close()
	}
	r.srv.stop()
}

// memWatch samples the server's receive memory (from its metrics) until
// stopped, keeping the largest value: the flood's peak as the engine
// counts it.
type memWatch struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	max   float64
	err   error
}

func watchMemory(ctx context.Context, srv *server) *memWatch {
	w := &memWatch{stopc: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			m, err := srv.scrape(ctx)
			if err != nil {
				w.err = err
				return
			}
			w.max = max(w.max, m.get("homa_receive_memory_bytes"))
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the largest value seen.
func (w *memWatch) stop() (float64, error) {
	close(w.stopc)
	w.wg.Wait()
	return w.max, w.err
}

// mib formats bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
