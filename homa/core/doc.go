// Package core is the Homa protocol of one endpoint (one local port)
// with no I/O: no goroutines, no sockets, no clock, no locks. It owns
// every RPC, peer, grant, timer and buffer of the protocol, and is driven
// by its caller, the shell (package homa's Endpoint, or a simulator):
//
//   - Handle(packet, from, now) feeds a received packet; Unreachable
//     feeds an ICMP report for a packet sent earlier;
//   - Send, Reply, Abort and Delivered are the application's calls;
//   - Tick(now) runs the timers that are due and returns the next
//     deadline; an idle core has none, and needs no wake-up at all.
//
// Each call appends what it produced to an Output: packets to transmit,
// and messages for the application (complete requests and responses,
// failed client RPCs). Time is a time.Duration since an epoch of the
// caller's choosing, passed in as now; it must not go backwards.
//
// A Core is not safe for concurrent use: the shell serializes calls
// (one lock, or one owner goroutine per core).
//
// # Resource accounting
//
// Nothing a peer says sizes what the core holds. Receive storage is
// committed as bytes arrive (at most four times what a message has
// brought, times the rounding of Buffers' size classes), never from a
// claimed length, and
// counted against Limits.RecvMemory, globally and per peer host; server
// RPCs are counted while their request arrives and while it awaits a
// reply, globally and per host; the peer table is bounded and evicts
// idle hosts. At a limit the core sheds the work of the host holding the
// most (its least recently active RPC first), so a flood from one host
// costs that host, not the others; within a host, RPCs that make
// progress survive those that do not. A granted sender that stays silent
// loses its grant (Limits.GrantTimeoutTicks); a RESEND never yields more
// than the bytes already sent, each once per resend interval, however
// many RESENDs ask. Every dropped packet is counted by reason
// (Stats.Drops).
//
// # Liveness
//
// Liveness is judged per RPC: an RPC whose peer says nothing about it
// through Resend.TimeoutResends RESENDs ends (a client RPC fails with
// ErrPeerTimeout; a server RPC is forgotten). Anything about the RPC
// counts as an answer, BUSY included, so a server that is still working
// keeps its clients waiting; traffic about other RPCs does not. A message
// that has every byte it was granted is owed nothing and is not silent.
//
// The configured timing (Resend, Ack, Limits.GrantTimeoutTicks) is a
// floor: the core measures each peer's round trip and stretches that
// peer's timers to it (see rtt.go), so a slow path is not flooded with
// RESENDs and NEED_ACKs, and its senders keep their grants while their
// bytes are on the way.
//
// # SRPT inside the endpoint
//
// Grants and priorities give the network SRPT; the core keeps it in its
// own work. HandleBatch handles a batch in SRPT order, not arrival order
// (rxorder.go): every packet other than DATA first (GRANT, RESEND, ACK,
// NEED_ACK, BUSY, RPC_UNKNOWN, CUTOFFS, ICMP reports), in arrival order;
// then DATA message by message, the message with the fewest bytes from
// its first packet in the batch to its end first, each message's packets
// in arrival order. A short message the batch completes is therefore
// delivered (Output.Messages) before the core copies the packets of a
// longer one, and the messages a batch completes come out shortest
// remaining first. Handle, for one packet, has nothing to order.
//
// Every call puts the packets it produced in the same order before it
// returns (txorder.go): packets other than DATA first, then DATA message
// by message, fewest bytes to go first, each message's packets in order.
// Without the pacer every granted byte goes out in the call that allows
// it, so nothing waits in the core for a later call; with the pacer
// (Config.LinkMbps), DATA waits in its queue, which releases one segment
// at a time of the message with the fewest remaining bytes, so a short
// message queued while a long one is paced out is the next to go.
// Retransmissions wait there too (only control packets skip the queue),
// so answering a RESEND for much of a long message does not put it
// ahead of a short one.
package core
