package erpc_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"sort"
	"time"

	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/erpc"
)

// A server Nexus registers a dispatch handler and runs one Rpc's event
// loop; a client Rpc opens a session to it and calls it, first with an
// event loop and continuations, then with the blocking Call. UDP
// encapsulation on loopback needs no privileges; drop Socket for Homa
// over IP.
func Example() {
	cfg := &erpc.Config{Socket: &sock.Config{Transport: sock.UDP}}

	// The server: request type 1 upper-cases.
	server, err := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:27200"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	server.Register(1, func(h *erpc.ReqHandle) {
		resp := h.PreResp()
		h.Rpc().ResizeMsgBuffer(resp, len(h.Request()))
		copy(resp.Data(), bytes.ToUpper(h.Request()))
		h.Rpc().EnqueueResponse(h, resp)
	}, erpc.Dispatch)
	srv, err := server.NewRpc(0, nil)
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error)
	go func() { served <- srv.Serve(context.Background()) }() // until the Nexus closes
	defer func() { server.Close(); <-served; srv.Close() }()

	// The client: one Rpc, one session.
	client, err := erpc.NewNexus(netip.MustParseAddrPort("127.0.0.1:27210"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	rpc, err := client.NewRpc(0, func(s erpc.Session, ev erpc.SMEvent, err error) {
		fmt.Println("session:", ev)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rpc.Close()
	session, err := rpc.CreateSession(server.Addr(), 0)
	if err != nil {
		log.Fatal(err)
	}

	// Asynchronous requests: continuations run in the event loop, in
	// whatever order the responses come.
	var got []string
	for _, w := range []string{"alpha", "beta", "gamma"} {
		req, _ := rpc.AllocMsgBuffer(len(w))
		copy(req.Data(), w)
		resp, _ := rpc.AllocMsgBuffer(0)
		rpc.EnqueueRequest(session, 1, req, resp, func(resp *erpc.MsgBuffer, tag any, err error) {
			if err != nil {
				log.Fatal(err)
			}
			got = append(got, string(resp.Data()))
			rpc.FreeMsgBuffer(tag.(*erpc.MsgBuffer))
			rpc.FreeMsgBuffer(resp)
		}, req)
	}
	for len(got) < 3 {
		rpc.RunEventLoop(10 * time.Millisecond)
	}
	sort.Strings(got)
	fmt.Println(got)

	// The blocking form, exactly-once.
	out, err := rpc.Call(context.Background(), session, 1, []byte("once"), erpc.ExactlyOnce)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	// Output:
	// session: connected
	// [ALPHA BETA GAMMA]
	// ONCE
}
