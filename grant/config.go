package grant

import "math"

// Defaults for Config, those of the Linux implementation (spec/WIRE.md).
const (
	DefaultMaxOvercommit = 8
	DefaultMaxIncoming   = 400_000
	DefaultPerPeer       = 1
	DefaultFIFOPerMille  = 50
	DefaultFIFOIncrement = 50_000
	DefaultSchedLevels   = 4
)

// MaxLevels is the number of Homa priority levels (0..7); scheduled levels
// are the lowest SchedLevels of them.
const MaxLevels = 8

// Config holds the grant policy. A zero field means its default.
type Config struct {
	// MaxOvercommit is how many messages are granted at once. Default 8.
	MaxOvercommit int
	// MaxIncoming bounds total incoming: bytes granted (or unscheduled)
	// and not yet received, over all messages. Default 400,000.
	MaxIncoming int
	// Window is how far beyond its received bytes a message is granted.
	// Zero (or negative): MaxIncoming / (M + 1) for a granted set of M
	// messages.
	Window int
	// PerPeer is how many messages from one sending peer may be in the
	// granted set at once. Default 1; MaxOvercommit or more means no
	// limit.
	PerPeer int
	// FIFOPerMille is the share of granted bytes, in thousandths, that go
	// to the oldest message needing grants. Default 50 (5%); negative
	// disables the share; values above 1000 count as 1000.
	FIFOPerMille int
	// FIFOIncrement is the size of one FIFO grant. Default 50,000.
	FIFOIncrement int
	// SchedLevels is the number of priority levels for scheduled bytes:
	// grants use priorities 0..SchedLevels-1. Default 4, at most
	// MaxLevels.
	SchedLevels int
}

// WithDefaults returns c with every unset field replaced by its default
// and every field clamped to a usable range.
func (c Config) WithDefaults() Config {
	if c.MaxOvercommit <= 0 {
		c.MaxOvercommit = DefaultMaxOvercommit
	}
	if c.MaxIncoming <= 0 {
		c.MaxIncoming = DefaultMaxIncoming
	}
	c.Window = max(c.Window, 0)
	if c.PerPeer <= 0 {
		c.PerPeer = DefaultPerPeer
	}
	switch {
	case c.FIFOPerMille == 0:
		c.FIFOPerMille = DefaultFIFOPerMille
	case c.FIFOPerMille < 0:
		c.FIFOPerMille = -1
	}
	c.FIFOPerMille = min(c.FIFOPerMille, 1000)
	if c.FIFOIncrement <= 0 {
		c.FIFOIncrement = DefaultFIFOIncrement
	}
	c.FIFOIncrement = min(c.FIFOIncrement, math.MaxInt32)
	if c.SchedLevels <= 0 {
		c.SchedLevels = DefaultSchedLevels
	}
	c.SchedLevels = min(c.SchedLevels, MaxLevels)
	return c
}

// fifoEvery is the number of SRPT-granted bytes after which one
// FIFOIncrement falls due: FIFOIncrement*(1000-FIFOPerMille)/FIFOPerMille,
// at least 1. It is 0 when the FIFO share is off. c must have its
// defaults.
func (c Config) fifoEvery() int64 {
	if c.FIFOPerMille < 0 {
		return 0
	}
	n := int64(c.FIFOIncrement) * int64(1000-c.FIFOPerMille) / int64(c.FIFOPerMille)
	return max(n, 1)
}
