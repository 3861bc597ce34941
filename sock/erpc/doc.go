// Package erpc is an RPC layer in the style of eRPC (Kalia et al., NSDI
// 2019) over Homa sockets, with optional exactly-once requests in the
// style of RIFL and the R2P2 exactly-once report. It uses only package
// sock's public API, so it runs on every sock backend: the user-space
// engine over raw IP or UDP, and the Linux kernel module.
//
// # The model
//
// A Nexus is the per-process part: an address (host and Homa server
// port) where other processes reach it, the table of request handlers by
// request type (0-255), one goroutine answering session management and
// heartbeats on the Nexus's own socket (and keeping the leases, see
// Leases), and a pool of worker goroutines for background handlers,
// sized when the Nexus is created.
//
// An Rpc is an endpoint owned by one goroutine, with a small numeric id.
// It owns one Homa socket bound to a server port (so that it both serves
// and calls), its client sessions, and an event loop: RunEventLoop,
// RunEventLoopOnce or Serve. The loop receives from the socket directly,
// runs dispatch handlers and continuations, sends queued requests, and
// runs the timers (exactly-once retries, acknowledgments, connect
// timeouts, record expiry).
//
//	 client process                                 server process
//	+--------------------------+                   +-----------------------------+
//	| Rpc 0 (owner goroutine)  |   connect -----> | Nexus socket: SM goroutine   |
//	|   session -> (nexus, 0)  |   <---- port     |   makes the server session   |
//	|   event loop: Recv  <----+---- responses ---+-- Rpc 0 socket, event loop   |
//	|   EnqueueRequest  -------+---- requests --->|   dispatch handler, or       |
//	+--------------------------+                   |   worker pool (background)   |
//	                                               +-----------------------------+
//
// A session connects a client Rpc to a server Rpc. CreateSession sends a
// connect request to the remote Nexus, naming the Rpc id; the Nexus
// makes a server session at that Rpc and answers with the Rpc's port and
// the session's number and token; the session-management handler then
// gets Connected. Nobody answering (the transport declares the host dead,
// or ConnectTimeout passes) or an unknown Rpc id gives ConnectFailed.
// Requests may be enqueued while connecting.
//
// EnqueueRequest(session, reqType, req, resp, continuation, tag) sends a
// request held in a MsgBuffer; the response is copied into resp and the
// continuation runs in the event loop. At most Config.SessionWindow
// requests (default 8) of a session are outstanding; more wait in the
// session's queue, bounded by MaxQueuedRequests. Requests complete in
// any order. Rpc.Call is the blocking form for the owning goroutine: it
// runs the same event loop until its response comes. Requests the event
// loop sends (from continuations, say) go out together, as eRPC batches
// its transmissions: the loop takes the messages already complete after
// each one it waited for, and sends its turn's requests and responses
// (sock.Batch) in one system call before it waits again. A response
// given while a turn runs, by a dispatch handler or by a worker, leaves
// with the turn's; one enqueued outside a turn goes at once.
//
// A dispatch handler runs in the server Rpc's event loop (for handlers of
// a few microseconds); a background handler runs on a worker goroutine.
// Either answers with EnqueueResponse, at once or later: a handler may
// issue requests of its own (nested RPCs; a background handler through
// Rpc.Submit) and respond from their continuations. EnqueueResponse may
// be called from any goroutine.
//
// # Other goroutines
//
// An Rpc belongs to the goroutine that runs its event loop. Every other
// goroutine (a background handler's worker, say) hands work to it with
// Rpc.Submit: the function goes into a bounded queue (Config.SubmitQueue)
// and the loop, woken if it waits for messages, runs it between messages
// as it runs continuations, so it may call EnqueueRequest, CreateSession
// and the rest. A background handler issues its nested requests that way
// and answers from their continuations. An owner-only method called by a
// second goroutine while the owner runs the event loop (waiting for a
// message or handling one) or another owner-only method is refused with
// an *OwnerError matching ErrNotOwner (methods without an error result
// panic with it) and counted in Stats.NotOwner. The check is one atomic
// load (or compare-and-swap) per call, not a goroutine identity: a call
// made exactly while the owner runs a handler or continuation cannot be
// told from one made by that handler, and is not caught (the race
// detector catches it). eRPC likewise has background threads hand their
// requests to the dispatch thread through a queue; there they call
// enqueue_request directly and the library queues for them, here the
// application submits a function, which keeps every owner-only method
// lock-free.
//
// # Leases
//
// A server forgets a client that has gone silent. A client Rpc talks to
// each server Nexus under a client id of its own, random, which every
// session it opens there carries: the server holds a lease per client id,
// with the sessions made under it and the exactly-once records of its
// requests. Every request and acknowledgment renews the lease; a client
// that sends none has its Nexus send a heartbeat instead, at most one per
// server host per quarter of the lease, naming all its idle client ids
// there. A lease unheard for Config.LeaseTimeout (default 4 s) goes, with
// its sessions and records, within 5/4 of it. Nothing runs per session:
// the server's Nexus advances an epoch every quarter lease while it holds
// leases, a request stamps its lease with the epoch (an atomic load, and
// a store once per epoch), and each tick forgets the leases stamped too
// long ago. So a server whose clients crash or close without
// DestroySession keeps room for new ones, and an idle server with no
// leases does nothing at all.
//
// Nor can a client host that stays alive take the room of the others:
// the Rpcs of one host, whatever their ports, hold at most a share of a
// server Rpc's sessions (Config.MaxServerSessionsPerHost, by default a
// fifth of MaxServerSessions) and of its Nexus's leases
// (MaxLeasesPerHost, a fifth of MaxLeases), as the engine shares its
// own bounds among hosts (sock.Limits); its connects beyond a share fail
// with ErrTooManySessions while other hosts connect. eRPC bounds the
// sessions of an Rpc only.
//
// A client whose lease is gone learns it from the heartbeat's reply, or
// when a request finds that the server no longer knows its session: the
// session is reset, its pending requests fail with ErrSessionReset
// wrapping ErrLeaseExpired (or saying that the server forgot the session),
// and the handler gets Reset. The layer does not reconnect by itself: the
// application destroys the session and creates another, which gets a new
// client id. A client id is fresh until a connect under it succeeds, and
// only a fresh connect may create a lease; a later connect under an id
// whose lease is gone is refused as expired, so no request of a forgotten
// client is ever taken for a new one. The client then connects again
// under a new id, at once: the session had sent nothing under the old
// one.
//
// # Large messages
//
// A request or response may be as large as Config.MaxMessage (default 8
// MiB), exactly-once or not. One larger than MaxMsgSize (one Homa
// message) travels as several Homa messages, fragments of MaxMsgSize
// bytes (the last one less), each with a header that names its message
// and its place. A large request goes as pipelined fragments: the client
// keeps up to Config.FragmentWindow of them in flight (default 4), all
// within that many fragments of the first one not yet acknowledged, and
// sends the next as each is acknowledged; the fragment that completes
// the request is answered with the response. A large response comes as
// eRPC fetches one with requests-for-response: the reply carries its
// first fragment and total, and the client pulls the rest, again up to
// FragmentWindow pulls in flight, writing each fragment at its place as
// it comes. So a large message costs about one round trip per window of
// fragments, not per fragment. eRPC pipelines packets within a message
// under its credits; here each fragment is already a Homa message that
// Homa moves at full rate with its own grants, and the window only keeps
// several of them moving at once.
//
// The receiver commits memory only for fragments that arrived and fit its
// limits. A server checks the claimed total against its MaxMessage and
// charges each fragment to LargeMessageBytes, and to its client host's
// share of it (LargeMessageBytesPerHost, a quarter by default), as it
// comes (refusing, retryably, what does not fit), so a peer's claim of 8
// MB costs nothing until the bytes arrive, and one host that keeps its
// messages alive leaves room for the others. Fragments may arrive in any order within
// MaxFragmentWindow (16) fragments of the first one still missing, and
// are put in their place; a fragment beyond that window, off a fragment
// boundary, short (but for the last), repeated, or with another total
// drops its message, and every refusal is counted in
// Stats.LargeRefused. A client's FragmentWindow is therefore at most
// MaxFragmentWindow. A message that makes no progress for MessageTimeout
// is dropped. A client refuses a response whose total is above its own
// MaxMessage, pulls only fragments of the total it accepted, and grows
// its buffer only with the bytes that came.
//
// The layer copies a large message's bytes little and allocates them
// once at most. The sender puts each fragment's header in the bytes just
// before the fragment, and puts them back once the transport has copied
// the frame, so a large request goes from the application's MsgBuffer
// and a large response from the handler's: EnqueueResponse takes a
// response larger than MaxMsgSize over, storage and all, and leaves the
// MsgBuffer empty. (An exactly-once response kept in its record is the
// exception: its pulls, and duplicates answered with its first fragment,
// copy the fragment out under the record's lock into a scratch buffer,
// so that the storage can go back to the pool when the record lets the
// response go.) The receiver writes each fragment at its
// place in the message's buffer as the fragments come in order (one
// that comes ahead of one missing waits in a chunk of its own, until
// those before it are in place), the buffer growing by doubling with
// the bytes that came; the handler reads the request there. Every Rpc
// keeps up to 16 MiB of freed large buffers (two messages of the
// default MaxMessage), and a server Rpc up to four chunks of one
// fragment, for its next large messages: a server that reassembles a
// request, answers it and has its response pulled, or a client that
// calls with MsgBuffers it reuses, allocates nothing more from one
// large message to the next. Rpc.Call copies the request into a pooled
// buffer and returns the response as a new slice: one message
// allocated per call.
//
// A large exactly-once request keeps its exactly-once identity on every
// fragment, with the attempt number (see Exactly-once requests). The
// server gathers its fragments keyed by the identity, not the session,
// across attempts: every attempt carries the same bytes, so a newer
// attempt (a retry, or Resume on another session) takes over what the
// older ones left, a fragment it holds already is acknowledged again and
// not kept, and a late fragment of an older attempt is refused without
// harm. An attempt after one that sent fragments resumes: it first asks
// the server where it is (a pull at offset 0, which no response's pull
// is), the answer names the first fragment the server misses, and the
// attempt's window starts there. The client refuses, and counts in
// Stats.ResumeRefused, an answer that claims more than its attempts sent
// or a place in another request, and then starts from the first
// fragment, as it does when the server holds nothing; Stats.FragmentsSent
// and FragmentsSkipped count what went and what a resumption saved. A
// Ticket carries what its attempts sent, so Resume resumes too. (The
// server counts an attempt as a copy of the request, for its single
// acknowledgments, when its first fragment arrives: a resumed attempt
// that skips it is not counted, so its record may stay a tombstone until
// PacketLifetime rather than go at once; fewer is safe, more is not.)
// Every fragment is first checked against the completion record: a copy
// of a request running is parked, a copy of one that ran gets its
// recorded response at once, whatever fragment it is; the handler runs
// only when a complete request finds no record. A large exactly-once
// response is kept whole in the record (the handler's buffer itself, not
// a copy), and the client pulls it from there, so a duplicate of a
// completed request, on any session, is answered by pulling the same
// response again. An attempt of a large exactly-once request lives while
// it makes progress: RetryTimeout counts from its last fragment
// acknowledged or pulled, so ExactlyOnceConfig.RTT (and with it
// RetryTimeout) must cover a window of fragments on the path; the next
// attempt resumes where the server is (or from the first fragment, if
// the server let the message go after MessageTimeout: a resumed
// attempt's fragment that finds nothing held beyond the window is
// refused retryably, and the attempt after it asks again).
//
// # Failures
//
// Homa makes each RPC at-most-once: a handler never runs twice for one
// transport RPC, whatever the network does. When the transport reports a
// request's RPC failed, the request fails with that error (wrapped;
// errors.Is matches both this package's errors and sock's). A peer
// timeout is the death of the session's server: the session's transport
// RPCs are aborted, every pending continuation runs with ErrSessionReset
// (matching sock.ErrPeerTimeout), and the handler gets Reset. Request
// buffers go back to the application only then; the transport copies a
// request when it is sent and holds nothing of it once its RPC is
// aborted.
//
// # Exactly-once requests
//
// With the ExactlyOnce option a request survives timeouts: an attempt
// the transport reports timed out, or that gets no answer within
// RetryTimeout, is abandoned and sent again (up to MaxRetries times,
// RetryTimeout apart) under the same identity: the client id of the Rpc
// at that server Nexus (its lease, see Leases) and a sequence number. The
// server keeps a completion record per (client id, sequence), not per
// session: a duplicate of a request in progress waits for its response; a
// duplicate of a completed one gets the recorded response; the handler
// runs once. The client acknowledges, in later requests or, after
// AckDelay, in an ack message: an ack floor below which every sequence is
// complete (the server forgets those records and answers later copies as
// stale), and single sequences with their retry count (the server forgets
// such a record once every copy the client sent has arrived, or keeps a
// tombstone until PacketLifetime passes). The timeouts must satisfy table
// I of the R2P2 report, mapped as ExactlyOnceConfig documents; NewNexus
// rejects a configuration that does not, naming the inequality.
//
// A request whose outcome the client cannot learn (its session was reset,
// its attempts ran out, or the Call waiting for it ended) fails with an
// *IncompleteError that carries a Ticket: its identity. The application
// sends the request again with Resume(ticket), on the same session or a
// new one of the same Rpc to the same server Nexus; the server answers it
// from the record, or parks it behind the run in progress, so the handler
// still runs once:
//
//	resp, err := r.Call(ctx, s, reqType, req, erpc.ExactlyOnce)
//	if t := erpc.TicketOf(err); t != nil {
//		resp, err = r.Call(ctx2, s, reqType, req, erpc.Resume(t))
//	}
//
// Until it is resumed or released (ReleaseTicket, or TicketTimeout
// passes, default 30 s) a ticket holds the ack floor below its sequence,
// so its record stays.
//
// Memory is bounded in count (MaxRecords) and bytes (MaxRecordBytes). A
// record in progress reserves 1 KiB, what a small response needs, so the
// defaults take 65,536 requests in progress per Rpc; its response, up to
// MaxResponse (default and at most MaxMessage, 8 MiB), is counted
// against the bytes left when it comes and kept only if it fits (the
// defaults keep eight 8 MiB responses). A request that finds no room is
// refused before its handler runs with ErrRecordsFull, which is
// retryable (errors.Is(err, ErrRetryable)). A large response the record
// cannot keep is still delivered: it waits for the pulls of the attempt
// that ran it under LargeMessageBytes, as a large response that is not
// exactly-once (if that is full too, the client gets ErrResponseLost). An
// unacknowledged response goes after RecordTimeout, but its record stays,
// remembering that the request ran, until the client acknowledges it or
// its lease expires. So that a host whose clients keep their leases alive
// and acknowledge nothing cannot take the room of the others, the
// records of one host's clients hold at most a fifth of MaxRecords and a
// quarter of MaxRecordBytes (MaxRecordsPerHost, MaxRecordBytesPerHost):
// beyond them its requests are refused, and its responses not kept, as
// beyond the Rpc's bounds.
//
// The guarantee: while the server process and the client's lease live, a
// request sent under one identity runs at most once, however often it is
// sent, over any session of the client; and it runs once if the client
// keeps sending it while the server is reachable. Its limits:
//   - A copy that finds its record without a response (too large for the
//     room left, or kept past RecordTimeout) gets ErrResponseLost: it ran,
//     its response is gone. So does the client of a large response the
//     server could keep neither in the record nor for pulling.
//   - A large response is pulled from the record: pulls that outlast
//     RecordTimeout (2 s by default, from the handler's answer) find it
//     gone and fail with ErrResponseLost.
//   - When the lease expires (the client was silent for LeaseTimeout:
//     crashed, or cut off) the records go with it. The client's requests
//     then fail with ErrLeaseExpired and may have run; they cannot be
//     resumed, and the client id is refused from then on, so no copy runs
//     again.
//   - A server that restarts has no records: the same as an expired
//     lease (connects under the old id are refused).
//   - A client that crashes loses its tickets; a new Rpc is a new client.
//   - The client's word is taken for its own requests: an acknowledgment
//     that names fewer copies than it sent lets the record go when that
//     many have arrived, and a later copy runs again. This layer's
//     clients never do so; one that does harms only its own requests,
//     since a record answers only its client id, from its host.
//
// Where this departs from RIFL: RIFL's client ids are leases issued by a
// lease server and its records are durable with the object they update;
// here the client picks a random 64-bit id, the server itself keeps the
// lease (renewed by traffic and heartbeats, as RIFL's lease renewal), and
// records live in server memory, so the guarantee ends with the server
// process. RIFL keeps every record until acknowledged; here an
// unacknowledged response is dropped after RecordTimeout (the fact that
// it ran is kept), bounding the bytes a silent client pins. From the R2P2
// report: records are per server Rpc, not replicated, and the transport
// (Homa) retransmits within an attempt, so the server never resends a
// reply by itself. From eRPC: eRPC has no exactly-once layer; its
// sessions end only by the client or by failure detection of the server,
// while here the server also ends the sessions of a silent client.
//
// # Design
//
// Every Rpc owns a socket, and its event loop is the goroutine that
// calls Socket.Recv on it: a received message reaches the handler or
// continuation with no goroutine hand-off, just as with bare sock (which
// hands a completed message to the goroutine waiting in Recv). Rpcs
// sharing a socket would need a goroutine to demultiplex, a hand-off per
// message. Session management goes to the Nexus's own socket, as eRPC's
// session-management thread; the server sessions it makes are published
// copy-on-write, so event loops read them without a lock.
//
// The erpc header (header.go, version 3) opens every Homa message: a
// fixed 16-byte base (magic, version, kind, request type, flags, status,
// retry, session number and token), and for exactly-once messages a
// fixed 40-byte extension (client id, sequence, ack floor, acknowledged
// sequence and its retries, and for a fragment its index and the total),
// or for fragments of other large messages a fixed 16-byte one (message
// id, offset, total). Version 2 added leases to the connect messages,
// heartbeats, pulls and fragments; version 3 fragments of exactly-once
// messages and exactly-once pulls, and made every fragment MaxMsgSize
// bytes. A peer of another version has its messages refused. Resuming a
// large exactly-once request (above) needed no new version: the query is
// an exactly-once pull at offset 0, which a version 3 server answers
// stale (the client then starts from the first fragment), and a version
// 3 client never sends it, and sends every fragment of a newer attempt,
// which a newer server acknowledges whether it holds them or not. Parse
// checks every field of an untrusted message and never panics. A
// MsgBuffer keeps room for the largest header in front of its data, so
// header and data reach the transport as one slice with no copy.

// Timers have fixed durations, so each kind lives in a list in order of
// expiry, with O(1) insertion and removal; the event loop blocks in Recv
// with a context that ends at the next expiry, made again only when it
// fires, and reads the clock only then. In steady state the layer
// allocates nothing per request (MsgBuffers, request records and handles
// are recycled; an exactly-once response is copied once into its
// record).
//
// A benchmark client drives one Rpc per goroutine (per core), keeps many
// requests outstanding over a few sessions, re-enqueues from its
// continuations, and ends the loop with StopEventLoop; the server runs a
// dispatch echo handler under Serve. BenchmarkEcho32Ratio in this
// package does exactly that against bare sock on the same transport,
// alternating between the two so that both see the same machine:
//
//	go test -run '^$' -bench Echo32Ratio -benchtime 400000x ./sock/erpc/
//
// Everything is bounded by configuration: sessions per Rpc and per
// server Rpc, leases per Nexus, queued requests per session, the submit
// and background queues, completion records in count and bytes, tickets
// per server, the size of a message and the bytes of large messages a
// server holds. Every refusal is counted in Stats or NexusStats.
package erpc
