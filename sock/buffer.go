package sock

import "github.com/homa-go/homa/homa"

// NewBuffer returns a buffer of length n (its bytes not zeroed) from the
// engine's pool of message buffers, for SendOwned and ReplyOwned: the
// engine sends from it and puts it back in the pool when the RPC is
// done with it, so that a program that builds each message in a buffer
// of its own allocates none in steady state. A buffer never handed to a
// socket goes back with FreeBuffer, or to the garbage collector. The
// kernel backend copies what SendOwned and ReplyOwned are given, and
// the buffer goes to the garbage collector.
func NewBuffer(n int) []byte { return homa.NewBuffer(n) }

// FreeBuffer puts b, from NewBuffer, back in the pool, when it was never
// handed to a socket (or a copy of its bytes was); nothing may use b
// afterwards. Other slices are left to the garbage collector.
func FreeBuffer(b []byte) { homa.FreeBuffer(b) }
