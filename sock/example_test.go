package sock_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"sort"

	"github.com/homa-go/homa/sock"
)

// startUpper runs a server that answers each request with its bytes in
// upper case.
func startUpper(addr string) *sock.Socket {
	server, err := sock.Open(netip.MustParseAddrPort(addr), &sock.Config{Transport: sock.UDP})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			req, err := server.Recv(context.Background(), sock.Any)
			if err != nil {
				return // closed
			}
			server.Reply(req, bytes.ToUpper(req.Data))
			req.Release()
		}
	}()
	return server
}

// A server answers requests; a client calls it. UDP encapsulation needs
// no privileges; drop the Config for real Homa over IP.
func Example() {
	server := startUpper("127.0.0.1:27100")
	defer server.Close()

	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	resp, err := client.Call(context.Background(), server.LocalAddr(), []byte("hello, homa"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp.Data))
	// Output: HELLO, HOMA
}

// Send starts RPCs without waiting; Recv collects the responses in
// whatever order they complete, each carrying the cookie given to Send.
func ExampleSocket_Send() {
	server := startUpper("127.0.0.1:27101")
	defer server.Close()
	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	words := []string{"alpha", "beta", "gamma"}
	for i, w := range words {
		if _, err := client.Send(server.LocalAddr(), []byte(w), uint64(i)); err != nil {
			log.Fatal(err)
		}
	}
	var got []string
	for range words {
		m, err := client.Recv(context.Background(), sock.Any)
		if err != nil {
			log.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%s", words[m.Cookie], m.Data))
	}
	sort.Strings(got)
	fmt.Println(got)
	// Output: [alpha=ALPHA beta=BETA gamma=GAMMA]
}
