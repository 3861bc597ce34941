package core_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/resend"
)

var (
	serverAP = netip.MustParseAddrPort("10.0.0.1:500")
	clientAP = netip.MustParseAddrPort("10.0.0.2:40000")
)

// echo makes e answer every request with its own bytes, after delay,
// and counts how often each request (named by its first 8 bytes) ran.
func echo(e *sim.Endpoint, n *sim.Net, delay time.Duration, execs map[uint64]int) {
	e.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		if !m.IsRequest() {
			return
		}
		if execs != nil && len(m.Data) >= 8 {
			execs[binary.BigEndian.Uint64(m.Data)]++
		}
		if delay == 0 {
			_ = e.Reply(m, m.Data)
			return
		}
		n.After(delay, func() { _ = e.Reply(m, m.Data) })
	}
}

// results collects the responses and failures of a client's RPCs by id.
type results map[uint64]*contract.Message

func collect(e *sim.Endpoint) results {
	r := results{}
	e.OnMessage = func(_ *sim.Endpoint, m *contract.Message) { r[m.ID] = m }
	return r
}

// request is a payload of n bytes whose first 8 name it.
func request(name uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	for i := range b {
		b[i] = byte(name*131 + uint64(i)*7)
	}
	binary.BigEndian.PutUint64(b, name)
	return b[:max(n, 8)]
}

func send(t testing.TB, e *sim.Endpoint, dst netip.AddrPort, data []byte) uint64 {
	t.Helper()
	id, err := e.Send(dst, data, 0)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return id
}

// resendPatient gives RPCs 40 RESENDs before their peer counts as silent:
// at 30% loss both a RESEND and its answer are lost often enough that
// the default would fail healthy RPCs.
var resendPatient = resendConfig(40)

func resendConfig(timeoutResends int) resend.Config {
	return resend.Config{TimeoutResends: timeoutResends}
}

// senderID reads the sender id of any Homa packet's common header.
func senderID(pkt []byte) uint64 {
	if len(pkt) < wire.CommonLen {
		return 0
	}
	return binary.BigEndian.Uint64(pkt[20:28])
}
