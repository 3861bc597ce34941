package erpc

import (
	"net/netip"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/homa-go/homa/sock"
)

// TestRapidRecordHosts drives an Rpc's table of exactly-once records
// through random requests, duplicates, completions, acknowledgments,
// timeouts and lease expiries of clients on three hosts, and checks
// after every step that the hosts' counts add up to the table's (the
// records, their response bytes and reservations), that no host holds
// more than its shares, and that once every lease has expired nothing
// is left, of the hosts' counts either.
func TestRapidRecordHosts(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := &ExactlyOnceConfig{
			MaxRecords: rapid.IntRange(1, 12).Draw(rt, "maxRecords"), MaxRecordBytes: rapid.IntRange(recordReserve, 8*recordReserve).Draw(rt, "maxBytes"),
			RecordTimeout: 20 * time.Millisecond, PacketLifetime: 10 * time.Millisecond,
		}
		cfg.MaxRecordsPerHost = rapid.IntRange(1, cfg.MaxRecords).Draw(rt, "perHostRecords")
		cfg.MaxRecordBytesPerHost = rapid.IntRange(recordReserve, cfg.MaxRecordBytes).Draw(rt, "perHostBytes")
		var et eoTable
		et.init(cfg, &counters{}, &bufPool{max: 1 << 20})

		// Six clients, two on each of three hosts.
		type client struct {
			ss  *srvSession
			seq uint64
		}
		var clients []*client
		for i := range 6 {
			host := netip.AddrFrom4([4]byte{10, 9, 0, byte(i / 2)})
			l := &lease{id: uint64(100 + i), host: host}
			clients = append(clients, &client{ss: &srvSession{client: netip.AddrPortFrom(host, 9), clientID: l.id, lease: l}})
		}
		var inProgress []*eoRecord
		now := time.Unix(1000, 0)

		check := func(step string) {
			et.mu.Lock()
			defer et.mu.Unlock()
			var recs, bytes, reserved int
			for addr, hs := range et.hosts {
				recs += hs.recs
				bytes += hs.bytes
				reserved += hs.reserved
				if hs.recs > cfg.MaxRecordsPerHost || hs.bytes+hs.reserved > cfg.MaxRecordBytesPerHost {
					rt.Fatalf("%s: host %v holds %d records, %d bytes and %d reserved, beyond its shares %d and %d",
						step, addr, hs.recs, hs.bytes, hs.reserved, cfg.MaxRecordsPerHost, cfg.MaxRecordBytesPerHost)
				}
			}
			if recs != len(et.recs) || bytes != et.bytes || reserved != et.reserved {
				rt.Fatalf("%s: the hosts count %d records, %d bytes, %d reserved; the table %d, %d, %d",
					step, recs, bytes, reserved, len(et.recs), et.bytes, et.reserved)
			}
		}

		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			c := clients[rapid.IntRange(0, len(clients)-1).Draw(rt, "client")]
			switch op := rapid.IntRange(0, 5).Draw(rt, "op"); op {
			case 0, 1: // a new request, or a copy of a recent one
				seq := c.seq + 1
				if op == 1 && c.seq > 0 {
					seq = c.seq - uint64(rapid.IntRange(0, int(min(c.seq, 3))-1).Draw(rt, "back"))
				} else {
					c.seq = seq
				}
				h := &header{seq: seq}
				var scratch []byte
				v, rec, _, old := et.admit(c.ss, h, &sock.Message{}, true, true, &scratch)
				if old != nil {
					old.Release()
				}
				if v == eoNew && rec != nil {
					inProgress = append(inProgress, rec)
				}
			case 2: // a handler answers
				if len(inProgress) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(inProgress)-1).Draw(rt, "answer")
				rec := inProgress[i]
				inProgress = append(inProgress[:i], inProgress[i+1:]...)
				frame := make([]byte, rapid.IntRange(eoHeaderLen, 3*recordReserve).Draw(rt, "response"))
				if old, _ := et.complete(rec, frame, nil, now); old != nil {
					old.Release()
				}
			case 3: // an acknowledgment: the floor, or one request
				h := &header{ackFloor: uint64(rapid.IntRange(0, int(c.seq)+1).Draw(rt, "floor"))}
				if rapid.Bool().Draw(rt, "single") {
					h.flags, h.ackSeq = flagAck, uint64(rapid.IntRange(0, int(c.seq)).Draw(rt, "ackSeq"))
				}
				et.ack(c.ss, h)
			case 4: // time passes
				now = now.Add(time.Duration(rapid.IntRange(1, 30).Draw(rt, "ms")) * time.Millisecond)
				et.collect(now)
			case 5: // the client's lease expires
				c.ss.lease.dead.Store(true)
				for _, m := range et.dropDead() {
					m.Release()
				}
			}
			check("after a step")
		}
		// Every handler answers and every lease expires: nothing stays.
		for _, rec := range inProgress {
			et.complete(rec, make([]byte, eoHeaderLen), nil, now)
		}
		for _, c := range clients {
			c.ss.lease.dead.Store(true)
		}
		et.dropDead()
		check("at the end")
		if len(et.recs) != 0 || len(et.hosts) != 0 || len(et.clients) != 0 {
			rt.Fatalf("after every lease expired: %d records, %d hosts, %d clients", len(et.recs), len(et.hosts), len(et.clients))
		}
	})
}
