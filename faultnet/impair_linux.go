//go:build linux

package faultnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
)

// nftTable is the nftables table SetLoss owns in a namespace.
const nftTable = "faultnet"

// lossRules is the table SetLoss loads: %s is the condition for a drop. The rules sit on the input hook only. A packet between the two
// namespaces crosses exactly one input hook (the receiver's), so with the
// table in both namespaces every packet, in either direction, is dropped
// with probability N/1000 once. (Rules on both input and output of both
// namespaces would draw twice per packet; and a drop on output is not
// silent: the sender's sendmsg/sendmmsg gets EPERM, which is a different
// fault from loss in the network.) The named counters count the Homa
// packets seen and dropped; loading the table again resets them.
const lossRules = `add table inet faultnet
delete table inet faultnet
table inet faultnet {
	counter seen {}
	counter dropped {}
	chain input {
		type filter hook input priority filter; policy accept;
		meta l4proto 146 counter name "seen"
		meta l4proto 146 %scounter name "dropped" drop
	}
}
`

// LossCounters counts Homa packets at the input hooks of SetLoss.
type LossCounters struct {
	Seen, Dropped uint64
}

// Fraction is Dropped/Seen, or 0 if nothing was seen.
func (c LossCounters) Fraction() float64 {
	if c.Seen == 0 {
		return 0
	}
	return float64(c.Dropped) / float64(c.Seen)
}

// NftAvailable reports why nftables rules cannot be loaded, or nil.
func NftAvailable() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("the nft command is not installed (apt-get install nftables): %w", err)
	}
	return nil
}

// SetLoss makes the namespace's kernel drop, at random, permille out of
// every 1000 Homa packets (IP protocol 146) it receives, and resets the
// counters. Other protocols (ICMP, for one) pass.
func (ns *NS) SetLoss(permille int) error {
	if permille < 0 || permille > 1000 {
		return fmt.Errorf("faultnet: loss %d‰ out of range 0..1000", permille)
	}
	cond := fmt.Sprintf("numgen random mod 1000 < %d ", permille)
	if permille == 1000 {
		cond = "" // nft allows only 0..999 on the right of <
	}
	_, err := runInput(fmt.Sprintf(lossRules, cond), "ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	return err
}

// ClearLoss removes the rules of SetLoss.
func (ns *NS) ClearLoss() error {
	_, err := ns.Exec("nft", "delete", "table", "inet", nftTable)
	return err
}

// LossCounters reads the counters of SetLoss.
func (ns *NS) LossCounters() (LossCounters, error) {
	out, err := ns.Exec("nft", "-j", "list", "counters", "table", "inet", nftTable)
	if err != nil {
		return LossCounters{}, err
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string
				Packets uint64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return LossCounters{}, fmt.Errorf("faultnet: nft counters in %s: %w", ns.Name, err)
	}
	var c LossCounters
	for _, o := range doc.Nftables {
		switch {
		case o.Counter == nil:
		case o.Counter.Name == "seen":
			c.Seen = o.Counter.Packets
		case o.Counter.Name == "dropped":
			c.Dropped = o.Counter.Packets
		}
	}
	return c, nil
}

// SetLoss loads the drop rule in both namespaces: every packet on the
// link, either way, is dropped with probability permille/1000.
func (p *Pair) SetLoss(permille int) error {
	return errors.Join(p.A.SetLoss(permille), p.B.SetLoss(permille))
}

// ClearLoss removes the drop rules of both namespaces.
func (p *Pair) ClearLoss() error {
	return errors.Join(p.A.ClearLoss(), p.B.ClearLoss())
}

// LossCounters sums the counters of both namespaces.
func (p *Pair) LossCounters() (LossCounters, error) {
	a, errA := p.A.LossCounters()
	b, errB := p.B.LossCounters()
	return LossCounters{Seen: a.Seen + b.Seen, Dropped: a.Dropped + b.Dropped}, errors.Join(errA, errB)
}

// SetRate limits what the namespace sends on Dev to bitsPerSec with a
// token bucket (tc tbf), queueing up to 20 ms of traffic and dropping the
// rest. Burst is 10 ms at the rate, at least 64 KB, so that a full
// 40 KB unscheduled window fits.
func (ns *NS) SetRate(bitsPerSec uint64) error {
	burst := max(bitsPerSec/8/100, 64<<10)
	_, err := ns.Exec("tc", "qdisc", "replace", "dev", Dev, "root", "tbf",
		"rate", strconv.FormatUint(bitsPerSec, 10)+"bit",
		"burst", strconv.FormatUint(burst, 10), "latency", "20ms")
	return err
}

// ClearRate removes the limit of SetRate.
func (ns *NS) ClearRate() error {
	_, err := ns.Exec("tc", "qdisc", "del", "dev", Dev, "root")
	return err
}
