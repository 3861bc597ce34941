package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// describeLimit bounds the lines of one client socket's description.
const describeLimit = 64

// watchStuck makes a run that is about to time out say why: shortly
// before ctx's deadline (a tenth of the time left, at most a second) it
// writes to w what the clients' Homa sockets still hold for their RPCs
// (see describeClients), while the RPCs that have not ended are still
// there to see; when the deadline passes they are aborted and forgotten.
// A run that ends in time stops the watch (the function returned) first.
func watchStuck(ctx context.Context, w io.Writer, name string, clients []client) (stop func() bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return func() bool { return false }
	}
	left := time.Until(deadline)
	before := min(time.Second, left/10)
	return time.AfterFunc(left-before, func() {
		if ctx.Err() == nil {
			describeClients(w, fmt.Sprintf("%s: %v before the timeout", name, before), clients)
		}
	}).Stop
}

// describeClients writes, under the heading what, a description of the
// RPCs each client's Homa socket holds (sock.Socket.Describe): their
// state, what of each message was sent, granted and received, and when
// their timers are due. Clients without a Homa socket are skipped.
func describeClients(w io.Writer, what string, clients []client) {
	var b bytes.Buffer
	for i, c := range clients {
		sc, ok := c.(socketOf)
		if !ok || sc.Socket() == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "%s, the clients' Homa sockets hold:\n", what)
		}
		fmt.Fprintf(&b, "client %d, socket %v:\n", i, sc.Socket().LocalAddr())
		if !sc.Socket().Describe(&b, describeLimit) {
			fmt.Fprintf(&b, "  (the kernel's: not described)\n")
		}
	}
	_, _ = w.Write(b.Bytes())
}
