package netrpc

import (
	"fmt"
	"time"

	"github.com/homa-go/homa/sock"
)

// Config configures either end of netrpc: NewServer, NewClientCodecConfig
// and DialConfig. A nil *Config, and the zero value of every field, mean
// the default. The client uses MaxMessage; the server every field.
type Config struct {
	// MaxMessage bounds a call's request and reply as they travel (the
	// method, a few bytes of framing and the gob-encoded value). A
	// message up to one Homa message (1,000,000 bytes) travels as one;
	// a longer one as several (see the package documentation). Default
	// 8 MiB (8,388,608 bytes), at most MaxMessageLimit. A client refuses
	// to send a longer request and to fetch a longer reply; a server
	// refuses to assemble a longer request and to send a longer reply.
	MaxMessage int
	// LargeMemory bounds the bytes a server holds for large messages:
	// requests being assembled from their parts and replies waiting for
	// their clients to fetch them. Memory is counted as parts arrive,
	// never from the length a part claims. LargeMemoryPerPeer bounds one
	// client host's share. Defaults 256 MiB and a quarter of LargeMemory
	// (64 MiB: room for several 8 MiB calls from one host at once). A
	// large request that would exceed them is refused, and its call
	// fails with an error saying so (retry later).
	LargeMemory, LargeMemoryPerPeer int
	// LargeTimeout is how long a server keeps a large request that
	// brings no new part, or a large reply its client fetches nothing
	// of, before dropping it. Default 10 s.
	LargeTimeout time.Duration
}

// Defaults and bounds of Config.
const (
	DefaultMaxMessage   = 8 << 20
	MaxMessageLimit     = 1 << 30
	DefaultLargeMemory  = 256 << 20
	DefaultLargeTimeout = 10 * time.Second
)

// homaMax is the largest Homa message (sock.ErrMessageTooLong): a call
// this long or shorter travels as one.
const homaMax = 1_000_000

// withDefaults returns cfg with its zero fields set to the defaults and
// the others clamped to what works.
func (cfg *Config) withDefaults() Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	c.MaxMessage = min(c.MaxMessage, MaxMessageLimit)
	if c.LargeMemory <= 0 {
		c.LargeMemory = DefaultLargeMemory
	}
	if c.LargeMemoryPerPeer <= 0 {
		c.LargeMemoryPerPeer = c.LargeMemory / 4
	}
	c.LargeMemoryPerPeer = min(c.LargeMemoryPerPeer, c.LargeMemory)
	if c.LargeTimeout <= 0 {
		c.LargeTimeout = DefaultLargeTimeout
	}
	return c
}

// tooLong is the error of a message longer than MaxMessage, saying who
// set the limit and how to raise it. It matches sock.ErrMessageTooLong,
// without repeating that error's text, which is about one Homa message.
func tooLong(what string, n, limit int, who string) error {
	return &tooLongError{fmt.Sprintf("netrpc: %s of %d bytes exceeds the %s's limit of %d bytes (raise netrpc.Config.MaxMessage, at most %d)",
		what, n, who, limit, MaxMessageLimit)}
}

// tooLongError is the error tooLong returns.
type tooLongError struct{ msg string }

func (e *tooLongError) Error() string { return e.msg }
func (e *tooLongError) Unwrap() error { return sock.ErrMessageTooLong }
