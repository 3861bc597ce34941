package bench

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"time"

	"github.com/homa-go/homa/internal/tools/rawfloor"
)

// rateFloor is the raw-socket floor in throughput mode: a rawfloor.Rate
// whose client sockets (one per --clients) one goroutine drives, as one
// asyncClient holding every lane of the run, slot s on socket s mod
// clients. One goroutine, because the floor is the most the sockets can
// carry: a goroutine per socket, spinning, would leave the server's
// goroutine fewer turns on the processors.
type rateFloor struct {
	r       *rawfloor.Rate
	clients int
	done    completion
	stopped bool
}

// openRateFloor is the floor's rate form; DenyRaw replaces it to play a
// host that refuses raw sockets.
var openRateFloor = rawfloor.OpenRate

func openFloorRate(_ context.Context, host netip.Addr, clients int) (client, error) {
	r, err := openRateFloor(host, clients)
	if err != nil {
		return nil, err
	}
	return &rateFloor{r: r, clients: clients}, nil
}

// call makes one RPC on the first socket (warmup and calibration make
// theirs so): the response is copied into the lane's buffer.
func (f *rateFloor) call(ctx context.Context, l *lane, req []byte) ([]byte, error) {
	var resp []byte
	err := f.start(0, req, func(_ int, r []byte, err error) {
		l.buf = append(l.buf[:0], r...)
		resp = l.buf
		f.stop()
	})
	if err == nil {
		err = f.loop(ctx, time.Time{})
	}
	if err == nil && resp == nil {
		err = errors.New("floor: no response")
	}
	return resp, err
}

// singleOwner is true: one goroutine drives every socket.
func (f *rateFloor) singleOwner() bool { return true }

func (f *rateFloor) start(slot int, req []byte, done completion) error {
	f.done = done
	return f.r.Client(slot%f.clients).Send(uint64(slot), req)
}

// loop polls every client socket in turn, sending what was queued and
// completing the responses read, until deadline (zero: none), ctx's end
// or stop. It yields the processor after a round that read nothing.
func (f *rateFloor) loop(ctx context.Context, deadline time.Time) error {
	complete := func(slot uint64, resp []byte) { f.done(int(slot), resp, nil) }
	for f.stopped = false; !f.stopped; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return nil
		}
		read := 0
		for c := 0; c < f.clients && !f.stopped; c++ {
			n, err := f.r.Client(c).Poll(complete)
			if err != nil {
				return err
			}
			read += n
		}
		if read == 0 {
			runtime.Gosched()
		}
	}
	return nil
}

func (f *rateFloor) stop() { f.stopped = true }

func (f *rateFloor) Close() error { return f.r.Close() }
