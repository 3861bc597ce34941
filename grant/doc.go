// Package grant is the receiver side of Homa's flow control: it decides
// which incoming messages get GRANTs, how far each grant reaches, and at
// which priority the sender transmits the granted bytes.
//
// # Policy
//
// A message is registered with Add once its first DATA packet arrives. Its
// unscheduled bytes are implicitly granted: its grant offset starts at
// min(unsched, length) and those bytes count as incoming at once. Every
// message whose grant offset is below its length "needs grants"; those are
// ranked by remaining bytes (length minus bytes received, fewest first: SRPT),
// ties broken by age (earlier Add first).
//
// Each Decide walks the ranking from the top and builds the granted set: at
// most MaxOvercommit messages, skipping a message whose sending peer already
// has PerPeer messages in the set. The set is recomputed from scratch every
// time, so a new shorter message preempts longer ones at the very next
// Decide. Walking the set in rank order, each member's offset is raised to
// received + window (never past its length), where window is the fixed
// Config.Window or MaxIncoming / (M + 1) for a set of M messages, and never
// so far that total incoming — granted or unscheduled bytes not yet
// received, summed over all registered messages — would exceed MaxIncoming.
// Higher-ranked members take the available room first. Offsets never
// decrease. When unscheduled bytes alone exceed MaxIncoming no grant is
// made until enough of them arrive, so the scheduled part of total incoming
// never exceeds MaxIncoming.
//
// SetLimit moves that bound while the Scheduler runs: a socket split into
// several schedulers (one per shard) lends each a part of one budget, so
// that together they keep within it, each granting its messages the
// windows MaxIncoming gives them as far as its part allows; Best tells
// the lender how close the scheduler's best message is to completion.
//
// # Priorities
//
// With M set members and S = SchedLevels scheduled levels (priorities
// 0..S-1), the member at rank r (0 = shortest) gets level
// max(min(M, S) - 1 - r, 0). That is the draft's rule: if M < S the M
// lowest levels are used, keeping the upper ones free for a preempting
// message; if M >= S the S-1 best members get dedicated levels and the rest
// share level 0. The best member always has the highest level in use. A
// message granted only by the FIFO rule below, while outside the set, gets
// level S-1: the FIFO share is meant to reserve bandwidth, and at level 0
// its packets would wait in the switch behind every other granted message.
//
// A GRANT is produced for a message when its offset rose, or when its level
// changed after it had already been sent a GRANT and while granted bytes
// are still on their way (a sender with nothing left to send learns the
// new level with its next grant).
//
// # FIFO share
//
// SRPT alone can starve a long message for as long as shorter ones keep
// arriving. With FIFOPerMille = f and FIFOIncrement = c, one increment of
// c bytes falls due each time the bytes granted by SRPT since the last
// one reach N = c*(1000-f)/f (950,000 with the defaults), so f per mille
// of granted bytes go by age. At most one increment is due at a time.
//
// Due bytes go to the oldest message (by Add order) that still needs
// grants, whether or not it is in the set and whether or not its peer
// already has a member there. They are paid at the start of the next grant
// pass, before any SRPT grant (and again right after the SRPT grants), as
// far as MaxIncoming allows and only so far that the message's own
// incoming stays within c. If it reaches its length, the rest goes on to
// the next oldest; if no message needs grants, the due bytes are dropped.
// If the oldest message already has c bytes or more outstanding (its
// sender has not delivered the last FIFO bytes), the due bytes wait for
// it, and SRPT grants go on meanwhile. So the FIFO share never holds more
// than c of the incoming budget: a sender that stalls (busy with other
// messages, or dead) cannot soak it up and idle the link, as it could if
// increments kept piling onto its message.
//
// Bound: let B be the ungranted bytes (length minus offset) of a message X
// and of every message registered before it, at the time X is added. All
// FIFO bytes paid while X still needs grants go to X or to those older
// messages, which cannot absorb B of them; and while the oldest message
// has no FIFO bytes outstanding, SRPT cannot grant again until the due
// increment is paid. So when the oldest senders deliver each FIFO grant
// within a grant pass or so, X is fully granted before SRPT has granted
// N*ceil(B/c) bytes after its Add, give or take one pass's worth (a pass
// that grants more than N makes only one increment due: with
// P = floor(MaxIncoming/N) + 1, the bound is N*P*ceil(B/c) + MaxIncoming).
// A slow oldest sender delays the share rather than losing it. As long as
// granted bytes keep arriving, SRPT granting cannot stop for good while
// any message needs grants, so every message is eventually fully granted.
// A negative FIFOPerMille turns the share off.
//
// # Use
//
// A Scheduler is not safe for concurrent use; the engine calls it under its
// own lock. It never reads the clock, starts goroutines or allocates once
// its tables have grown to the working set (Decide appends into a slice the
// caller reuses). Add, Received and Remove cost a map lookup, a binary
// search and a copy within the ranking of messages needing grants; Decide
// walks the ranking only until the set is full, which is MaxOvercommit
// steps unless many messages from peers already in the set rank ahead.
package grant
