package erpc_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// serveOn opens a Nexus at addr with register's handlers and runs Rpc 0's
// event loop until the returned stop is called.
func serveOn(addr string, cfg *erpc.Config, register func(nx *erpc.Nexus, r func() *erpc.Rpc)) (*erpc.Nexus, *erpc.Rpc, func()) {
	nx, err := erpc.NewNexus(netip.MustParseAddrPort(addr), cfg)
	if err != nil {
		log.Fatal(err)
	}
	var r *erpc.Rpc
	register(nx, func() *erpc.Rpc { return r })
	r, err = nx.NewRpc(0, nil)
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error)
	go func() { served <- r.Serve(context.Background()) }()
	return nx, r, func() { nx.Close(); <-served; r.Close() }
}

// A background handler, on a worker goroutine, issues a nested request
// through Submit, which runs it in the Rpc's event loop, and answers from
// the nested request's continuation.
func ExampleRpc_Submit() {
	cfg := &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}, BackgroundThreads: 2}
	var toSelf erpc.Session
	nx, srv, stop := serveOn("127.0.0.1:27300", cfg, func(nx *erpc.Nexus, rpc func() *erpc.Rpc) {
		// Type 2, in the event loop: upper-case.
		nx.Register(2, func(h *erpc.ReqHandle) {
			resp := h.PreResp()
			h.Rpc().ResizeMsgBuffer(resp, len(h.Request()))
			copy(resp.Data(), bytes.ToUpper(h.Request()))
			h.Rpc().EnqueueResponse(h, resp)
		}, erpc.Dispatch)
		// Type 1, on a worker: ask type 2, add "!".
		nx.Register(1, func(h *erpc.ReqHandle) {
			r := h.Rpc()
			req, _ := r.AllocMsgBuffer(len(h.Request()))
			copy(req.Data(), h.Request())
			resp, _ := r.AllocMsgBuffer(0)
			err := r.Submit(func() { // runs in r's event loop
				r.EnqueueRequest(toSelf, 2, req, resp, func(resp *erpc.MsgBuffer, _ any, err error) {
					out := h.PreResp()
					r.ResizeMsgBuffer(out, resp.Len()+1)
					copy(out.Data(), append(resp.Data(), '!'))
					r.EnqueueResponse(h, out)
					r.FreeMsgBuffer(req)
					r.FreeMsgBuffer(resp)
				}, nil)
			})
			if err != nil {
				log.Fatal(err)
			}
		}, erpc.Background)
	})
	defer stop()
	// The server's Rpc calls itself; set up before clients come.
	done := make(chan struct{})
	srv.Submit(func() {
		toSelf, _ = srv.CreateSession(nx.Addr(), 0)
		close(done)
	})
	<-done

	client, err := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:27310"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	rpc, _ := client.NewRpc(0, nil)
	defer rpc.Close()
	s, _ := rpc.CreateSession(nx.Addr(), 0)
	out, err := rpc.Call(context.Background(), s, 1, []byte("nested"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	// Output: NESTED!
}

// An exactly-once Call whose context ends before the handler answers
// returns a ticket; sent again with Resume, the request gets the response
// of its one run.
func ExampleResume() {
	cfg := &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}, BackgroundThreads: 1}
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	nx, _, stop := serveOn("127.0.0.1:27320", cfg, func(nx *erpc.Nexus, _ func() *erpc.Rpc) {
		nx.Register(1, func(h *erpc.ReqHandle) {
			if runs.Add(1) == 1 {
				close(started)
			}
			<-release // slow
			resp := h.PreResp()
			n := copy(resp.Data(), fmt.Sprintf("paid %s", h.Request()))
			h.Rpc().ResizeMsgBuffer(resp, n)
			h.Rpc().EnqueueResponse(h, resp)
		}, erpc.Background)
	})
	defer stop()

	client, _ := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:27330"), cfg)
	defer client.Close()
	rpc, _ := client.NewRpc(0, nil)
	defer rpc.Close()
	s, _ := rpc.CreateSession(nx.Addr(), 0)

	// The caller gives up once the handler has started.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := rpc.Call(ctx, s, 1, []byte("42"), erpc.ExactlyOnce)
	t := erpc.TicketOf(err)
	fmt.Println("first try:", ctx.Err(), "ticket:", t != nil)

	close(release)
	out, err := rpc.Call(context.Background(), s, 1, []byte("42"), erpc.Resume(t))
	fmt.Println("resumed:", string(out), err, "runs:", runs.Load())
	// Output:
	// first try: context canceled ticket: true
	// resumed: paid 42 <nil> runs: 1
}

// Messages beyond one Homa message, up to Config.MaxMessage (8 MiB by
// default), go in fragments, both ways, FragmentWindow of them in flight
// at once; exactly-once requests too, their responses kept in the
// completion record. An exactly-once attempt is abandoned when it makes
// no progress for RetryTimeout: with large messages, RTT (and so
// RetryTimeout) must cover a window of fragments, about a millisecond
// per fragment on an idle machine, here much more for a loaded one.
func Example_largeMessage() {
	cfg := &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}, FragmentWindow: 4,
		ExactlyOnce: erpc.ExactlyOnceConfig{RTT: 500 * time.Millisecond, RetryTimeout: time.Second, RecordTimeout: 12 * time.Second}}
	nx, _, stop := serveOn("127.0.0.1:27340", cfg, func(nx *erpc.Nexus, _ func() *erpc.Rpc) {
		nx.Register(1, func(h *erpc.ReqHandle) { // echo
			r := h.Rpc()
			b, _ := r.AllocMsgBuffer(len(h.Request()))
			copy(b.Data(), h.Request())
			r.EnqueueResponse(h, b) // takes b's storage over: no copy
			r.FreeMsgBuffer(b)      // b is empty; the storage comes back to the pool once pulled
		}, erpc.Dispatch)
	})
	defer stop()
	client, _ := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:27350"), cfg)
	defer client.Close()
	rpc, _ := client.NewRpc(0, nil)
	defer rpc.Close()
	s, _ := rpc.CreateSession(nx.Addr(), 0)

	req := bytes.Repeat([]byte("homa"), 1<<20) // 4 MiB
	out, err := rpc.Call(context.Background(), s, 1, req)
	fmt.Println(len(out), bytes.Equal(out, req), err)
	out, err = rpc.Call(context.Background(), s, 1, req, erpc.ExactlyOnce)
	fmt.Println(len(out), bytes.Equal(out, req), err)
	// Output:
	// 4194304 true <nil>
	// 4194304 true <nil>
}
