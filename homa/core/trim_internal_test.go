package core

import "testing"

// TestTrimShrinksTables: a table that a burst filled is moved to a map
// of its size by the first Trim after it emptied, and not before.
func TestTrimShrinksTables(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	for i := range 1000 {
		c.clients[uint64(i)] = nil
	}
	c.Trim()
	if c.peaks.clients != 1000 {
		t.Fatalf("peak %d, want 1000", c.peaks.clients)
	}
	big := c.clients
	for i := range 1000 {
		delete(c.clients, uint64(i))
	}
	c.clients[1] = nil
	big[2] = nil // visible through c.clients while not moved
	if _, ok := c.clients[2]; !ok {
		t.Fatal("the table moved before a Trim")
	}
	c.Trim()
	big[3] = nil
	if _, ok := c.clients[3]; ok || len(c.clients) != 2 || c.peaks.clients != 2 {
		t.Fatalf("after a Trim the emptied table was not moved: %d entries, peak %d", len(c.clients), c.peaks.clients)
	}
}
