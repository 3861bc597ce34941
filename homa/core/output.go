package core

import (
	"github.com/homa-go/homa/contract"
	"net/netip"
)

// heapBuffers allocates from the Go heap and leaves freed slices to the
// garbage collector.
type heapBuffers struct{}

func (heapBuffers) Get(n int) []byte { return make([]byte, n) }
func (heapBuffers) Put([]byte)       {}

// Packet is a packet the core asks to transmit: Buf, then Payload.
type Packet struct {
	// Buf is the packet's Homa header (for DATA) or the whole packet,
	// from the core's Buffers. The caller owns it once handed over and
	// returns it with Buffers.Put after sending.
	Buf []byte
	// Payload, for DATA, is the message's bytes the packet carries,
	// sent after Buf in the same datagram: it points into the message,
	// which one of Output.Holds keeps alive until the caller releases it.
	Payload []byte
	// Addr is the destination host.
	Addr netip.Addr
	// Priority is the network priority, 0 (lowest) to 7.
	Priority uint8
}

// Output collects what one call into the core produced: packets to
// transmit, in order; messages for the application (complete requests and
// responses, and failed client RPCs), in order; and the holds on the
// message buffers the packets point into. The caller drains and reuses
// it; the core only appends.
type Output struct {
	Packets  []Packet
	Messages []*contract.Message
	Holds    []*Hold
}

// Reset empties o, keeping its capacity. The caller has taken the
// packets and released (or taken) the holds.
func (o *Output) Reset() {
	clear(o.Packets)
	o.Packets = o.Packets[:0]
	clear(o.Messages)
	o.Messages = o.Messages[:0]
	clear(o.Holds)
	o.Holds = o.Holds[:0]
}

// Trim lets the storage of an empty Output go where load grew it past a
// few hundred entries (see Core.Trim).
func (o *Output) Trim() {
	dropScratch(&o.Packets)
	dropScratch(&o.Messages)
	dropScratch(&o.Holds)
}
