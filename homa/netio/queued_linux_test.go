package netio

import (
	"testing"
)

// TestQueued: a Conn tells whether a packet waits for it without taking
// it: not before one is sent, yes once it waits (and still after asking),
// not once it is read. Over UDP, a raw socket of the Conn's own and a
// member of a raw share.
func TestQueued(t *testing.T) {
	check := func(t *testing.T, c, sender Conn) {
		t.Helper()
		q, ok := c.(Queued)
		if !ok {
			t.Fatalf("%T has no Queued", c)
		}
		if q.Queued() {
			t.Fatal("Queued before anything was sent")
		}
		writeAll(t, sender, lo4, 0, testPacket(sender.Port(), c.Port(), 100, 7))
		for range 2 { // asking takes nothing
			if !q.Queued() {
				readN(t, c, 1)
				t.Fatal("not Queued with a packet waiting")
			}
		}
		if got := readN(t, c, 1); len(got) != 1 || tagOf(got[0].data) != 7 {
			t.Fatalf("read %v after asking, want the packet tagged 7", got)
		}
		if q.Queued() {
			t.Error("Queued after the packet was read")
		}
		c.Close()
		if q.Queued() {
			t.Error("Queued once closed")
		}
	}
	t.Run("udp", func(t *testing.T) {
		c, err := OpenUDP(lo4, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		sender, err := OpenUDP(lo4, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close()
		check(t, c, sender)
	})
	t.Run("raw", func(t *testing.T) {
		ownSockets(t, 1)
		own := openRaw(t, lo4, 0, nil)
		member := openRaw(t, lo4, 0, nil)
		if !member.(StatsConn).Stats().Shared {
			t.Fatal("the second client Conn has a socket of its own")
		}
		sender := openRawPort(t, lo4)
		check(t, own, sender)
		check(t, member, sender)
	})
}
