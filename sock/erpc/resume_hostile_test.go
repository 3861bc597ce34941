package erpc

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
)

// fakeResumeServer speaks the server's side of the wire by hand on one
// socket (Nexus and Rpc both): it answers a connect, acknowledges the
// fragments of an exactly-once request, except that it leaves every
// fragment from the third on unanswered until the attempt that gets the
// last of claims (so that each earlier attempt times out and the next
// asks where to resume), answers the resume query of attempt a with
// claims[a-1], and answers the last fragment with "ok". It records the
// first fragment each attempt sent.
type fakeResumeServer struct {
	s      *sock.Socket
	claims []header // kind, flags and status are filled in
	mu     sync.Mutex
	first  map[uint16]int // attempt: the first fragment it sent
}

func (f *fakeResumeServer) serve() {
	for {
		m, err := f.s.Recv(context.Background(), sock.Any)
		if err != nil {
			return
		}
		var h header
		if _, err := h.Parse(m.Data); err != nil {
			m.Release()
			continue
		}
		var out []byte
		switch {
		case h.kind == kindConnect:
			out = (&header{kind: kindConnectReply, session: 1, token: 1}).Append(nil)
			out = (&connectReplyBody{port: f.s.LocalAddr().Port(), leaseMs: 4000}).Append(out)
		case h.kind == kindPull && h.fragOff == 0:
			f.mu.Lock()
			c := f.claims[min(len(f.first), len(f.claims))-1]
			f.mu.Unlock()
			c.kind, c.flags, c.clientID, c.seq = kindResponse, flagExactlyOnce|flagFragment, h.clientID, h.seq
			out = c.Append(nil)
		case h.kind == kindRequest && h.flags&flagFragment != 0:
			i := int(h.fragOff / fragChunk)
			f.mu.Lock()
			if _, ok := f.first[h.retry]; !ok {
				f.first[h.retry] = i
			}
			f.mu.Unlock()
			rh := header{kind: kindResponse, reqType: h.reqType, flags: flagExactlyOnce, clientID: h.clientID, seq: h.seq}
			switch {
			case int(h.retry) < len(f.claims) && i >= 2:
				m.Release() // never answered
				continue
			case i == fragments(int(h.total))-1:
				out = append(rh.Append(nil), "ok"...)
			default:
				rh.flags |= flagFragment
				rh.fragOff, rh.total = h.fragOff, h.total
				out = rh.Append(nil)
			}
		case h.kind == kindAck:
			out = (&header{kind: kindAckReply}).Append(nil)
		default:
			out = (&header{kind: kindResponse, status: statusBadRequest}).Append(nil)
		}
		_ = f.s.Reply(m, out)
		m.Release()
	}
}

// TestResumeHostile: a server's answer to a resume query that claims
// more of the request than the client sent, or a place in another
// request, or that does not parse, is refused and counted, and the
// attempt starts from the first fragment; so does one with a status (as
// a server of header version 3 answers), uncounted; a claim within what
// was sent is taken, and the attempt sends from there on.
func TestResumeHostile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 74})
		defer nw.Close()
		open := func(a netip.AddrPort) (*sock.Socket, error) {
			return socktest.OpenMem(nw, a, testConfig())
		}
		srvAddr := netip.AddrPortFrom(netip.MustParseAddr("10.4.0.1"), 2000)
		fs, err := open(srvAddr)
		if err != nil {
			t.Fatal(err)
		}
		const nfrag = 8
		total := uint32(nfrag*fragChunk - 100)
		// The first attempt sends fragments 0-5: 0 and 1 answered, then
		// four in flight.
		f := &fakeResumeServer{s: fs, first: map[uint16]int{}, claims: []header{
			{status: statusStale},                                               // a server of version 3: no resume, not refused
			{reqType: 1, fragOff: 7 * fragChunk, total: total},                  // beyond what the client sent
			{reqType: 1, fragOff: 2 * fragChunk, total: total + fragChunk},      // another request's
			{reqType: 1, fragOff: (nfrag + 1) * fragChunk, total: nfrag * 1000}, // beyond the total: does not parse
			{reqType: 2, fragOff: 2 * fragChunk, total: total},                  // another request type
			{reqType: 1, fragOff: 2 * fragChunk, total: total},                  // true
		}}
		var wg sync.WaitGroup
		wg.Go(f.serve)
		defer func() { fs.Close(); wg.Wait() }()

		nx, err := NewNexus(netip.AddrPortFrom(netip.MustParseAddr("10.4.0.2"), 2000), &Config{Open: open})
		if err != nil {
			t.Fatal(err)
		}
		defer nx.Close()
		r, err := nx.NewRpc(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s, err := r.CreateSession(srvAddr, 0)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Call(context.Background(), s, 1, make([]byte, total), ExactlyOnce)
		if err != nil || string(resp) != "ok" {
			t.Fatalf("call: %q, %v", resp, err)
		}
		st := r.Stats()
		if st.ResumeRefused != 4 || st.FragmentsSkipped != 2 || st.Retries != 6 {
			t.Fatalf("%d claims refused, %d fragments skipped, %d retries; want 4, 2, 6", st.ResumeRefused, st.FragmentsSkipped, st.Retries)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for a := uint16(0); a <= 6; a++ {
			if want := map[bool]int{true: 2, false: 0}[a == 6]; f.first[a] != want {
				t.Fatalf("attempt %d began at fragment %d, want %d (%v)", a, f.first[a], want, f.first)
			}
		}
	})
}
