package bench

import (
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/homa-go/homa/sock"
)

// SocketStats is what the Homa sockets of a protocol's clients, or its
// server's, counted over its whole run (warmup and calibration included),
// with Config.Stats (homa bench --stats): what the protocol did besides
// the RPCs, and the way of its messages from the socket to the
// application. Sockets is how many sockets were added up.
type SocketStats struct {
	Sockets         int               `json:"sockets"`
	RPCsStarted     uint64            `json:"rpcs_started"`
	Sent            map[string]uint64 `json:"sent_packets"`
	Received        map[string]uint64 `json:"received_packets"`
	Drops           map[string]uint64 `json:"drops,omitempty"`
	ResendsIssued   uint64            `json:"resends_issued"`
	ResendsUnneeded uint64            `json:"resends_unneeded"`
	Retransmissions uint64            `json:"retransmissions"`
	RPCTimeouts     uint64            `json:"rpc_timeouts"`
	ReaderParks     uint64            `json:"reader_parks"`
	ReaderSteals    uint64            `json:"reader_steals"`
	Handoffs        uint64            `json:"handoffs"`
	TimerWakeups    uint64            `json:"timer_wakeups"`
	TimerVain       uint64            `json:"timer_wakeups_vain"`
	TimerArms       uint64            `json:"timer_arms"`
}

// socketOf is a client that runs over a Homa socket.
type socketOf interface{ Socket() *sock.Socket }

// serverStats is the Stats of the server's Homa socket, or nil when it
// has none.
func serverStats(s *sock.Socket) *SocketStats {
	if s == nil {
		return nil
	}
	t := &SocketStats{Sent: map[string]uint64{}, Received: map[string]uint64{}, Drops: map[string]uint64{}}
	t.add(s.Stats())
	return t
}

// clientStats adds up the Stats of the clients' Homa sockets, or returns
// nil when none has one.
func clientStats(clients []client) *SocketStats {
	var t *SocketStats
	for _, c := range clients {
		sc, ok := c.(socketOf)
		if !ok || sc.Socket() == nil {
			continue
		}
		if t == nil {
			t = &SocketStats{Sent: map[string]uint64{}, Received: map[string]uint64{}, Drops: map[string]uint64{}}
		}
		t.add(sc.Socket().Stats())
	}
	return t
}

func (t *SocketStats) add(s sock.Stats) {
	t.Sockets++
	t.RPCsStarted += s.RPCsStarted
	for typ, n := range s.TxPackets {
		t.Sent[typ.String()] += n
	}
	for typ, n := range s.RxPackets {
		t.Received[typ.String()] += n
	}
	for r, n := range s.Drops {
		t.Drops[r.String()] += n
	}
	t.ResendsIssued += s.ResendsSent
	t.ResendsUnneeded += s.ResendsUnneeded
	t.Retransmissions += s.Retransmits
	t.RPCTimeouts += s.RPCTimeouts
	t.ReaderParks += s.ReaderParks
	t.ReaderSteals += s.ReaderSteals
	t.Handoffs += s.Handoffs
	t.TimerWakeups += s.TimerWakeups
	t.TimerVain += s.TimerWakeupsVain
	t.TimerArms += s.TimerArms
}

// write prints t in a few lines, per RPC where that reads better (rpcs:
// the RPCs of the whole run); side is "client" or "server".
func (t *SocketStats) write(w io.Writer, name, side string, rpcs int) {
	per := func(v uint64) string {
		if rpcs <= 0 {
			return fmt.Sprint(v)
		}
		return fmt.Sprintf("%d (%.2f/RPC)", v, float64(v)/float64(rpcs))
	}
	if side == "server" {
		fmt.Fprintf(w, "%s server: sent %s; received %s\n", name, counts(t.Sent), counts(t.Received))
	} else {
		fmt.Fprintf(w, "%s: %d client sockets; sent %s; received %s; Homa RPCs %s\n", name, t.Sockets, counts(t.Sent), counts(t.Received), per(t.RPCsStarted))
	}
	fmt.Fprintf(w, "  RESENDs issued %s (unneeded %d), retransmissions %d, RPCs timed out %d, drops %s\n",
		per(t.ResendsIssued), t.ResendsUnneeded, t.Retransmissions, t.RPCTimeouts, counts(t.Drops))
	fmt.Fprintf(w, "  receive path: parks %s, steals %s, hand-offs %s, timer wake-ups %s (vain %d), timers set %s\n",
		per(t.ReaderParks), per(t.ReaderSteals), per(t.Handoffs), per(t.TimerWakeups), t.TimerVain, per(t.TimerArms))
}

// counts prints a map of counts in name order ("none" when empty).
func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// join adds o, the counts of another run, to t, either possibly nil,
// field by field (every field of SocketStats is a count).
func (t *SocketStats) join(o *SocketStats) *SocketStats {
	if o == nil {
		return t
	}
	if t == nil {
		t = &SocketStats{}
	}
	tv, ov := reflect.ValueOf(t).Elem(), reflect.ValueOf(o).Elem()
	for i := range tv.NumField() {
		switch f, g := tv.Field(i), ov.Field(i); f.Kind() {
		case reflect.Int:
			f.SetInt(f.Int() + g.Int())
		case reflect.Uint64:
			f.SetUint(f.Uint() + g.Uint())
		case reflect.Map:
			f.Set(reflect.ValueOf(addCounts(f.Interface().(map[string]uint64), g.Interface().(map[string]uint64))))
		default:
			panic(fmt.Sprintf("bench: SocketStats.%s is not a count", tv.Type().Field(i).Name))
		}
	}
	return t
}

// addCounts adds the counts of o to m, which it makes if nil.
func addCounts(m, o map[string]uint64) map[string]uint64 {
	if m == nil && len(o) > 0 {
		m = make(map[string]uint64, len(o))
	}
	for k, n := range o {
		m[k] += n
	}
	return m
}
