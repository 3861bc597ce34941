//go:build linux

package sock_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"sync"

	"github.com/homa-go/homa/sock"
)

// A server socket of two shards: two engines on one UDP port, each with
// its own protocol state and kernel socket, so that two CPUs serve it at
// once. Every client's RPCs live in the client's shard; run at least as
// many goroutines in Recv(Any) as there are shards.
func Example_shards() {
	server, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:27111"), &sock.Config{Transport: sock.UDP, Shards: 2})
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				req, err := server.Recv(context.Background(), sock.Any)
				if err != nil {
					return // closed
				}
				server.Reply(req, bytes.ToUpper(req.Data))
				req.Release()
			}
		})
	}
	defer wg.Wait()
	defer server.Close()

	for _, word := range []string{"one", "two", "three"} {
		client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.UDP})
		if err != nil {
			log.Fatal(err)
		}
		resp, err := client.Call(context.Background(), server.LocalAddr(), []byte(word))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(resp.Data))
		resp.Release()
		client.Close()
	}
	// Output:
	// ONE
	// TWO
	// THREE
}
