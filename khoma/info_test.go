package khoma

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
)

// statsRPCs are the RPCs of a socket in the middle of things.
var statsRPCs = []RPCInfo{
	// Client RPC receiving a 300,000-byte response: 200,000 bytes in,
	// 250,000 granted, so 50,000 granted and not yet received.
	{ID: 2, TxLength: 100, TxSent: 100, TxGranted: 100, RxLength: 300000, RxRemaining: 100000, RxGranted: 250000},
	// Client RPC sending a 5,000-byte request: 2,800 bytes out.
	{ID: 4, TxLength: 5000, TxSent: 2800, TxGranted: 5000, RxLength: -1},
	// Server RPC whose request is complete, not yet answered.
	{ID: 7, TxLength: -1, RxLength: 8, RxGranted: 8, Flags: HOMA_RPC_RX_READY},
	// Server RPC receiving, fully granted, nothing in yet.
	{ID: 9, TxLength: -1, RxLength: 1000, RxRemaining: 1000, RxGranted: 1000},
	// Nonsense from the kernel must not underflow: more remaining than
	// the length, more granted than the length, more sent than the
	// length.
	{ID: 11, TxLength: 10, TxSent: 20, RxLength: 10, RxRemaining: 50, RxGranted: 90},
}

func TestFillStats(t *testing.T) {
	in := Info{NumRPCs: len(statsRPCs), RPCs: statsRPCs}
	var st contract.Stats
	in.fillStats(&st)
	if st.ClientRPCs != 2 || st.ServerRPCs != 3 {
		t.Errorf("client and server RPCs %d and %d, want 2 and 3", st.ClientRPCs, st.ServerRPCs)
	}
	// Receiving: RPCs 2, 9 and 11; RPC 2 still needs grants. Incoming:
	// 50,000 (RPC 2) + 1,000 (RPC 9) + 10 (RPC 11, capped at its length).
	if g := st.Grants; g.Active != 3 || g.Grantable != 1 || g.Incoming != 51010 {
		t.Errorf("grants %+v, want 3 active, 1 grantable, 51010 incoming", g)
	}
	if p := st.Pacer; p.Queued != 1 || p.QueuedBytes != 2200 {
		t.Errorf("pacer %+v, want 1 message with 2200 bytes to send", p)
	}

	// Only some of the RPCs reported: the counts stay as they were.
	in = Info{NumRPCs: 9, RPCs: statsRPCs[:2]}
	st = contract.Stats{ClientRPCs: 5, ServerRPCs: 4}
	in.fillStats(&st)
	if st.ClientRPCs != 5 || st.ServerRPCs != 4 || st.Pacer.Queued != 1 {
		t.Errorf("partial info: %d client, %d server RPCs, %d queued", st.ClientRPCs, st.ServerRPCs, st.Pacer.Queued)
	}
}

// TestSocketStats: Stats takes the current state from HOMAIOCINFO, and
// falls back to its own records of the RPCs where the call fails.
func TestSocketStats(t *testing.T) {
	h := newFakeHost()
	s, c := h.socket(0)
	defer s.Close()
	silent, _ := h.socket(80)
	defer silent.Close()
	if _, err := s.Send(silent.LocalAddr(), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ClientRPCs != 1 || st.RPCsStarted != 1 {
		t.Errorf("one RPC: %d client RPCs, %d started", st.ClientRPCs, st.RPCsStarted)
	}

	h.mu.Lock()
	c.infoRPCs = statsRPCs
	h.mu.Unlock()
	st := s.Stats()
	if st.ClientRPCs != 2 || st.ServerRPCs != 3 || st.Grants.Incoming != 51010 || st.Pacer.QueuedBytes != 2200 || st.RPCsStarted != 1 {
		t.Errorf("stats from the kernel: %d client, %d server RPCs, %d incoming, %d to send, %d started",
			st.ClientRPCs, st.ServerRPCs, st.Grants.Incoming, st.Pacer.QueuedBytes, st.RPCsStarted)
	}
	in, err := s.Info(3)
	if err != nil || in.NumRPCs != len(statsRPCs) || len(in.RPCs) != 3 || in.Port != s.LocalAddr().Port() {
		t.Errorf("Info(3) = %d of %d RPCs, port %d, %v", len(in.RPCs), in.NumRPCs, in.Port, err)
	}
	if s.UAPI() != UAPI617 {
		t.Errorf("UAPI = %v", s.UAPI())
	}

	h.mu.Lock()
	c.infoErr = errors.ErrUnsupported
	h.mu.Unlock()
	if st := s.Stats(); st.ClientRPCs != 1 || st.ServerRPCs != 0 || st.Grants.Incoming != 0 {
		t.Errorf("without HOMAIOCINFO: %d client, %d server RPCs, %d incoming", st.ClientRPCs, st.ServerRPCs, st.Grants.Incoming)
	}

	s.Close()
	if _, err := s.Info(1); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("Info after Close = %v", err)
	}
	if st := s.Stats(); st.RPCsStarted != 1 || st.ClientRPCs != 0 {
		t.Errorf("Stats after Close: %d started, %d client RPCs", st.RPCsStarted, st.ClientRPCs)
	}
}

// TestStatsWhileServing: Stats runs concurrently with RPCs (the race
// detector checks the fake's state and the socket's).
func TestStatsWhileServing(t *testing.T) {
	_, server, client, _ := echoPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			if err := call(ctx, client, server.LocalAddr(), payload(uint64(i), 1000)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for {
		select {
		case <-done:
			if st := client.Stats(); st.ClientRPCs != 0 || st.RPCsCompleted != 50 {
				t.Errorf("after 50 RPCs: %d client RPCs, %d completed", st.ClientRPCs, st.RPCsCompleted)
			}
			return
		default:
			_ = client.Stats()
			_ = server.Stats()
		}
	}
}
