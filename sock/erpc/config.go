package erpc

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/homa-go/homa/sock"
)

// Config configures a Nexus and the Rpcs it creates. The zero value of
// every field means its default; a nil *Config means all defaults.
type Config struct {
	// Socket configures every Homa socket the Nexus opens (its own and
	// one per Rpc): backend, transport, engine tuning. Nil means sock's
	// defaults (raw IP on the engine).
	Socket *sock.Config
	// Open, when set, opens the Homa sockets instead of sock.Open with
	// Socket: for example with a sock.Config whose Network is a memnet.Network.
	Open func(addr netip.AddrPort) (*sock.Socket, error)
	// RpcPortBase is where the ports of Rpc sockets start: Rpc id i first
	// tries RpcPortBase+i, then the ports 256, 512, ... above it while
	// they are taken. Default: the Nexus's port + 1.
	RpcPortBase uint16

	// BackgroundThreads is the number of worker goroutines that run
	// background handlers, started with the Nexus. Default 0: registering
	// a background handler then fails.
	BackgroundThreads int
	// BackgroundQueue bounds the requests waiting for a worker; a request
	// that finds it full is answered ErrServerBusy. Default 1024.
	BackgroundQueue int

	// SubmitQueue bounds the functions waiting in an Rpc's submit queue
	// (Rpc.Submit); Submit beyond it fails with ErrQueueFull. Default
	// 4096.
	SubmitQueue int

	// SessionWindow is how many requests of one session may be
	// outstanding at once; more are queued. Default 8, at most 256.
	SessionWindow int
	// MaxQueuedRequests bounds the requests queued behind a full window,
	// per session; EnqueueRequest beyond it fails with ErrQueueFull.
	// Default 4096.
	MaxQueuedRequests int
	// MaxSessions bounds the client sessions of one Rpc. Default 1024.
	MaxSessions int
	// MaxServerSessions bounds the sessions other Rpcs hold to one Rpc;
	// connects beyond it fail with ErrTooManySessions. Default 4096.
	MaxServerSessions int
	// MaxServerSessionsPerHost bounds the sessions the Rpcs of one
	// client host, whatever their ports, hold to one Rpc, so that one
	// host cannot take the whole table from the others; its connects
	// beyond it fail with ErrTooManySessions. Default a fifth of
	// MaxServerSessions (at least one).
	MaxServerSessionsPerHost int
	// ConnectTimeout bounds the wait for a connect reply; the transport
	// usually reports a silent server sooner. Default 1 s.
	ConnectTimeout time.Duration
	// LeaseTimeout is how long a server keeps the sessions and
	// exactly-once records of a client it hears nothing from (no
	// request, acknowledgment or heartbeat): it forgets them after
	// between LeaseTimeout and 5/4 of it. Clients heartbeat each server
	// host at most once per quarter of the shorter of the two ends'
	// LeaseTimeout when they send no requests. It must exceed
	// ExactlyOnce.PacketLifetime. Default 4 s.
	LeaseTimeout time.Duration
	// MaxLeases bounds the client leases a Nexus holds (one per client
	// Rpc that connects to it); connects of new clients beyond it fail
	// with ErrTooManySessions. Default 65,536.
	MaxLeases int
	// MaxLeasesPerHost bounds the leases of the client Rpcs of one host;
	// connects of its new clients beyond it fail with
	// ErrTooManySessions. Default a fifth of MaxLeases.
	MaxLeasesPerHost int

	// MaxMessage is the largest request or response, sent or accepted.
	// One larger than MaxMsgSize travels as several Homa messages
	// (fragments of MaxMsgSize bytes); the receiver commits memory
	// for each as it arrives, never for the length a peer claims.
	// Default 8 MiB; at most 1 GiB.
	MaxMessage int
	// LargeMessageBytes bounds, per server Rpc, the bytes of large
	// messages held: requests being reassembled and responses waiting
	// for the client to fetch them. A fragment that does not fit is
	// refused (ErrServerBusy, retryable) and its message dropped.
	// Default 64 MiB.
	LargeMessageBytes int
	// LargeMessageBytesPerHost bounds what the large messages of one
	// client host hold of LargeMessageBytes, so that a host that keeps
	// its messages alive (a fragment now and then) cannot take the room
	// of the others; a host also holds at most a fifth of the 1,024
	// large messages a server Rpc keeps at once. Its fragments beyond
	// either are refused as beyond LargeMessageBytes. Default a quarter
	// of LargeMessageBytes.
	LargeMessageBytesPerHost int
	// MessageTimeout is how long a server Rpc keeps a large request or
	// response that makes no progress (no fragment arrives, none is
	// fetched). Default 2 s.
	MessageTimeout time.Duration
	// FragmentWindow is how many fragments of one large message a client
	// keeps in flight: fragments of a request sent and not yet
	// acknowledged, or pulls of a response not yet answered. A server
	// takes fragments up to MaxFragmentWindow ahead of the first one it
	// misses, so a client's window above that is refused. Default 4,
	// 1..MaxFragmentWindow.
	FragmentWindow int

	// ExactlyOnce configures exactly-once requests, on both ends.
	ExactlyOnce ExactlyOnceConfig
}

// ExactlyOnceConfig times and bounds exactly-once requests (R2P2/RIFL
// style). The client retries an attempt that failed by timeout under the
// same (client id, sequence); the server keeps a completion record with
// the response until the client acknowledges it, answers duplicates from
// it, and forgets it by acknowledgment or by timeout.
//
// The timeouts must satisfy the inequalities of table I of the R2P2
// exactly-once report, mapped onto a transport that is itself reliable
// (Homa retransmits within an attempt, so the server does not resend
// replies; it keeps the record instead):
//
//	Timeout A > RTT + compute time:  RetryTimeout > RTT + HandlerTime
//	N x Timeout 1 > M x Timeout A:   RecordTimeout > MaxRetries x RetryTimeout
//	Timeout 1 > RTT:                 RecordTimeout > AckDelay + RTT
//	Timeout 2, set by the network:   PacketLifetime >= RTT
//
// A configuration that breaks one is rejected with a *ConfigError naming
// it.
type ExactlyOnceConfig struct {
	// RTT is the longest one attempt should take on the transport,
	// network round trip and the transport's own loss recovery included.
	// For a large message, an attempt's progress is a fragment
	// acknowledged or pulled, so RTT must cover a window of fragments
	// (FragmentWindow x about 1 MB) on the path. Default 20 ms.
	RTT time.Duration
	// HandlerTime is the longest an exactly-once handler takes to
	// respond. Default 10 ms.
	HandlerTime time.Duration
	// RetryTimeout (Timeout A) is how long the client waits for an
	// attempt before abandoning it and sending the request again (for a
	// large message: how long it waits for the attempt's next fragment
	// to be acknowledged or pulled; a new attempt starts from the first
	// fragment); an attempt the transport reports timed out is retried
	// RetryTimeout later. Default 100 ms.
	RetryTimeout time.Duration
	// MaxRetries (M) is how many times a request is sent again before
	// it fails. Default 10; negative means none.
	MaxRetries int
	// RecordTimeout is how long the server keeps the response of a
	// completed record waiting for the client's acknowledgment (N x
	// Timeout 1 of the report). After it the response goes but the
	// record stays, remembering that the request ran (a copy then gets
	// ErrResponseLost), until the client acknowledges it or its lease
	// expires. Default 2 s.
	RecordTimeout time.Duration
	// PacketLifetime (Timeout 2) is the longest a request can take from
	// the client's send to the server's event loop: network, transport
	// and receive queue. After it, no copy of a forgotten request can
	// arrive. Default 1 s.
	PacketLifetime time.Duration
	// AckDelay is how long a client holds acknowledgments for a later
	// request to carry before it sends them alone. Default 1 ms.
	AckDelay time.Duration
	// MaxRecords bounds the completion records of one Rpc (in progress,
	// completed and forgotten-but-remembered). Default 65,536.
	MaxRecords int
	// MaxRecordBytes bounds the response bytes the records of one Rpc
	// hold. A record in progress reserves 1 KiB of it; its response is
	// kept if it fits in what is left when it comes (else it is sent but
	// not kept: a copy gets ErrResponseLost). A new request that finds
	// less than 1 KiB left is refused before its handler runs, with
	// ErrRecordsFull (retryable). Default 64 MiB: 65,536 requests with
	// small responses in flight, or 64 responses of MaxMsgSize kept, or
	// eight of 8 MiB.
	MaxRecordBytes int
	// MaxRecordsPerHost and MaxRecordBytesPerHost bound what the records
	// of the clients of one host hold of MaxRecords and MaxRecordBytes
	// (defaults a fifth and a quarter of them), so that a host that
	// keeps its lease alive and never acknowledges cannot take the room
	// of the others: its new requests beyond them are refused as beyond
	// the Rpc's bounds (ErrRecordsFull), and a response that does not
	// fit in its share is not kept (ErrResponseLost for a copy).
	MaxRecordsPerHost, MaxRecordBytesPerHost int
	// MaxResponse is the largest response of an exactly-once request.
	// Default and at most Config.MaxMessage.
	MaxResponse int
	// MaxTickets bounds the tickets (see Ticket) a client Rpc holds per
	// server Nexus; beyond it the oldest is released. Default 1024.
	MaxTickets int
	// TicketTimeout is how long a ticket may wait to be resumed before
	// it is released (a ticket holds the ack floor, and with it the
	// server's records of the client's later requests whose single
	// acknowledgments were lost). Default 30 s.
	TicketTimeout time.Duration
}

// Defaults.
const (
	defaultBackgroundQueue   = 1024
	defaultSubmitQueue       = 4096
	defaultSessionWindow     = 8
	maxSessionWindow         = 256
	defaultMaxQueuedRequests = 4096
	defaultMaxSessions       = 1024
	maxSessions              = 1 << 24 // session numbers fit in 24 bits of a cookie
	defaultMaxServerSessions = 4096
	defaultConnectTimeout    = time.Second
	defaultLeaseTimeout      = 4 * time.Second
	defaultMaxMessage        = 8 << 20
	maxMaxMessage            = 1 << 30
	defaultLargeMessageBytes = 64 << 20
	defaultMessageTimeout    = 2 * time.Second
	defaultFragmentWindow    = 4
	maxLeaseTimeout          = 1 << 31 * time.Millisecond // the connect reply's field
	defaultMaxLeases         = 1 << 16

	defaultRTT            = 20 * time.Millisecond
	defaultHandlerTime    = 10 * time.Millisecond
	defaultRetryTimeout   = 100 * time.Millisecond
	defaultMaxRetries     = 10
	maxRetries            = 1<<16 - 1 // the header's retry field
	defaultRecordTimeout  = 2 * time.Second
	defaultPacketLifetime = time.Second
	defaultAckDelay       = time.Millisecond
	defaultMaxRecords     = 1 << 16
	defaultMaxRecordBytes = 64 << 20
	defaultMaxTickets     = 1024
	defaultTicketTimeout  = 30 * time.Second
)

// withDefaults returns c with every zero field set to its default, or a
// *ConfigError.
func (c Config) withDefaults(nexusPort uint16) (Config, error) {
	if c.Socket == nil {
		c.Socket = &sock.Config{}
	}
	if c.RpcPortBase == 0 {
		c.RpcPortBase = nexusPort + 1
	}
	if c.RpcPortBase > maxServerPort {
		return c, &ConfigError{"RpcPortBase", fmt.Sprintf("must be a server port, 1..%d (got %d)", maxServerPort, c.RpcPortBase)}
	}
	if c.BackgroundThreads < 0 {
		return c, &ConfigError{"BackgroundThreads", "must not be negative"}
	}
	if err := orDefault(&c.BackgroundQueue, defaultBackgroundQueue, "BackgroundQueue"); err != nil {
		return c, err
	}
	if err := orDefault(&c.SubmitQueue, defaultSubmitQueue, "SubmitQueue"); err != nil {
		return c, err
	}
	if c.SessionWindow == 0 {
		c.SessionWindow = defaultSessionWindow
	}
	if c.SessionWindow < 0 || c.SessionWindow > maxSessionWindow {
		return c, &ConfigError{"SessionWindow", fmt.Sprintf("must be 1..%d (got %d)", maxSessionWindow, c.SessionWindow)}
	}
	if err := orDefault(&c.MaxQueuedRequests, defaultMaxQueuedRequests, "MaxQueuedRequests"); err != nil {
		return c, err
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = defaultMaxSessions
	}
	if c.MaxSessions < 0 || c.MaxSessions > maxSessions {
		return c, &ConfigError{"MaxSessions", fmt.Sprintf("must be 1..%d (got %d)", maxSessions, c.MaxSessions)}
	}
	if err := orDefault(&c.MaxServerSessions, defaultMaxServerSessions, "MaxServerSessions"); err != nil {
		return c, err
	}
	if err := orDefault(&c.MaxServerSessionsPerHost, hostShare(c.MaxServerSessions), "MaxServerSessionsPerHost"); err != nil {
		return c, err
	}
	if err := orDefault(&c.ConnectTimeout, defaultConnectTimeout, "ConnectTimeout"); err != nil {
		return c, err
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = defaultMaxMessage
	}
	if c.MaxMessage < 0 || c.MaxMessage > maxMaxMessage {
		return c, &ConfigError{"MaxMessage", fmt.Sprintf("must be 1..%d (got %d)", maxMaxMessage, c.MaxMessage)}
	}
	if err := orDefault(&c.LargeMessageBytes, defaultLargeMessageBytes, "LargeMessageBytes"); err != nil {
		return c, err
	}
	if err := orDefault(&c.LargeMessageBytesPerHost, max(c.LargeMessageBytes/4, 1), "LargeMessageBytesPerHost"); err != nil {
		return c, err
	}
	if err := orDefault(&c.MessageTimeout, defaultMessageTimeout, "MessageTimeout"); err != nil {
		return c, err
	}
	if c.FragmentWindow == 0 {
		c.FragmentWindow = defaultFragmentWindow
	}
	if c.FragmentWindow < 0 || c.FragmentWindow > MaxFragmentWindow {
		return c, &ConfigError{"FragmentWindow", fmt.Sprintf("must be 1..%d (got %d)", MaxFragmentWindow, c.FragmentWindow)}
	}
	if err := orDefault(&c.MaxLeases, defaultMaxLeases, "MaxLeases"); err != nil {
		return c, err
	}
	if err := orDefault(&c.MaxLeasesPerHost, hostShare(c.MaxLeases), "MaxLeasesPerHost"); err != nil {
		return c, err
	}
	var err error
	c.ExactlyOnce, err = c.ExactlyOnce.withDefaults(c.MaxMessage)
	if err != nil {
		return c, err
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = defaultLeaseTimeout
	}
	if c.LeaseTimeout < 0 || c.LeaseTimeout > maxLeaseTimeout {
		return c, &ConfigError{"LeaseTimeout", fmt.Sprintf("must be positive and at most %v", maxLeaseTimeout)}
	}
	if c.LeaseTimeout <= c.ExactlyOnce.PacketLifetime {
		return c, &ConfigError{"LeaseTimeout", fmt.Sprintf(
			"must exceed ExactlyOnce.PacketLifetime, so that no connect outlives the lease it made: %v <= %v",
			c.LeaseTimeout, c.ExactlyOnce.PacketLifetime)}
	}
	return c, nil
}

// withDefaults fills in the defaults and checks table I. maxMessage is
// the Config's MaxMessage.
func (e ExactlyOnceConfig) withDefaults(maxMessage int) (ExactlyOnceConfig, error) {
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RTT", &e.RTT, defaultRTT},
		{"HandlerTime", &e.HandlerTime, defaultHandlerTime},
		{"RetryTimeout", &e.RetryTimeout, defaultRetryTimeout},
		{"RecordTimeout", &e.RecordTimeout, defaultRecordTimeout},
		{"PacketLifetime", &e.PacketLifetime, defaultPacketLifetime},
		{"AckDelay", &e.AckDelay, defaultAckDelay},
		{"TicketTimeout", &e.TicketTimeout, defaultTicketTimeout},
	} {
		if *f.v < 0 {
			return e, &ConfigError{"ExactlyOnce." + f.name, "must not be negative"}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case e.MaxRetries == 0:
		e.MaxRetries = defaultMaxRetries
	case e.MaxRetries < 0:
		e.MaxRetries = 0
	case e.MaxRetries > maxRetries:
		return e, &ConfigError{"ExactlyOnce.MaxRetries", fmt.Sprintf("must be at most %d (got %d)", maxRetries, e.MaxRetries)}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxRecords", &e.MaxRecords, defaultMaxRecords},
		{"MaxRecordBytes", &e.MaxRecordBytes, defaultMaxRecordBytes},
		{"MaxResponse", &e.MaxResponse, maxMessage},
		{"MaxTickets", &e.MaxTickets, defaultMaxTickets},
	} {
		if *f.v < 0 {
			return e, &ConfigError{"ExactlyOnce." + f.name, "must not be negative"}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if err := orDefault(&e.MaxRecordsPerHost, hostShare(e.MaxRecords), "ExactlyOnce.MaxRecordsPerHost"); err != nil {
		return e, err
	}
	if err := orDefault(&e.MaxRecordBytesPerHost, max(e.MaxRecordBytes/4, recordReserve), "ExactlyOnce.MaxRecordBytesPerHost"); err != nil {
		return e, err
	}
	if e.MaxRecordBytesPerHost < recordReserve {
		return e, &ConfigError{"ExactlyOnce.MaxRecordBytesPerHost", fmt.Sprintf("must hold at least one record in progress, %d bytes (got %d)", recordReserve, e.MaxRecordBytesPerHost)}
	}
	if e.MaxResponse > maxMessage {
		return e, &ConfigError{"ExactlyOnce.MaxResponse", fmt.Sprintf("must be at most Config.MaxMessage, %d (got %d)", maxMessage, e.MaxResponse)}
	}
	if e.MaxRecordBytes < recordReserve {
		return e, &ConfigError{"ExactlyOnce.MaxRecordBytes", fmt.Sprintf("must hold at least one record in progress, %d bytes (got %d)", recordReserve, e.MaxRecordBytes)}
	}
	return e, e.check()
}

// check verifies the inequalities of table I of the R2P2 exactly-once
// report, in the form ExactlyOnceConfig documents.
func (e *ExactlyOnceConfig) check() error {
	if e.RetryTimeout <= e.RTT+e.HandlerTime {
		return &ConfigError{"ExactlyOnce.RetryTimeout", fmt.Sprintf(
			"Timeout A > RTT + compute time (R2P2 table I) requires RetryTimeout > RTT + HandlerTime: %v <= %v + %v",
			e.RetryTimeout, e.RTT, e.HandlerTime)}
	}
	if e.RecordTimeout <= time.Duration(e.MaxRetries)*e.RetryTimeout {
		return &ConfigError{"ExactlyOnce.RecordTimeout", fmt.Sprintf(
			"N x Timeout 1 > M x Timeout A (R2P2 table I) requires RecordTimeout > MaxRetries x RetryTimeout: %v <= %d x %v",
			e.RecordTimeout, e.MaxRetries, e.RetryTimeout)}
	}
	if e.RecordTimeout <= e.AckDelay+e.RTT {
		return &ConfigError{"ExactlyOnce.RecordTimeout", fmt.Sprintf(
			"Timeout 1 > RTT (R2P2 table I) requires RecordTimeout > AckDelay + RTT: %v <= %v + %v",
			e.RecordTimeout, e.AckDelay, e.RTT)}
	}
	if e.PacketLifetime < e.RTT {
		return &ConfigError{"ExactlyOnce.PacketLifetime", fmt.Sprintf(
			"Timeout 2 is the longest life of a request, at least one attempt's RTT: %v < %v",
			e.PacketLifetime, e.RTT)}
	}
	return nil
}

// hostShare is the default share of one client host in a bound of n
// things: a fifth, as the engine's bounds on a host's RPCs
// (sock.Limits), at least one.
func hostShare(n int) int { return max(n/5, 1) }

// orDefault sets *v to def when it is zero, and refuses a negative one
// as field's error.
func orDefault[T int | int64 | time.Duration](v *T, def T, field string) error {
	if *v == 0 {
		*v = def
	}
	if *v < 0 {
		return &ConfigError{field, "must not be negative"}
	}
	return nil
}
