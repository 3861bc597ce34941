// Command slowecho is a slow Homa echo server on the Linux Homa module
// (package sock's Kernel backend), for the rig's guest: it answers each
// request with the request's own bytes, but only after a delay. The Linux
// Homa echo server of the rig (homa_tool) answers at once, so without
// this program a live test could not keep a client waiting on the
// module. While a reply is held back, the module answers the client's
// RESENDs with BUSY: interop's TestLiveSlowServer checks that the client
// keeps waiting through them.
//
//	slowecho [-delay 1s] [-max 64] HOST:PORT
//
// Each request is answered by its own goroutine, at most -max at once;
// one more request than that waits for a free slot (and so looks slower
// to its client). It prints one line when it starts and one per request.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/homa-go/homa/sock"
)

func main() {
	delay := flag.Duration("delay", time.Second, "how long each reply is held back")
	most := flag.Int("max", 64, "requests held back at once")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: slowecho [-delay D] [-max N] HOST:PORT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *most < 1 || *delay < 0 {
		flag.Usage()
		os.Exit(2)
	}
	addr, err := netip.ParseAddrPort(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowecho:", err)
		os.Exit(2)
	}
	s, err := sock.Open(addr, &sock.Config{Backend: sock.Kernel})
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowecho:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("slowecho on %v (backend %v), replies after %v\n", s.LocalAddr(), s.Backend(), *delay)
	err = serve(ctx, s, *delay, *most)
	s.Close()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "slowecho:", err)
		os.Exit(1)
	}
}

// serve answers requests on s after delay, at most most at once, until
// ctx ends or Recv fails; it returns when every reply goroutine has.
func serve(ctx context.Context, s *sock.Socket, delay time.Duration, most int) error {
	slots := make(chan struct{}, most)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m, err := s.Recv(ctx, sock.Any)
		if err != nil {
			return err
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			m.Release()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			defer m.Release()
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
			err := s.Reply(m, m.Data)
			fmt.Printf("request id %d from %v, %d bytes: replied after %v: %v\n", m.ID, m.Peer, len(m.Data), delay, errString(err))
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
