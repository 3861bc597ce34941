package linuxcap

import (
	"slices"
	"testing"
)

func TestLoad(t *testing.T) {
	dir, ok := Dir()
	if !ok {
		t.Fatalf("no captures at %s: they are part of the repository", dir)
	}
	caps, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	total, tx := 0, 0
	var names []string
	for _, c := range caps {
		names = append(names, c.Name)
		for _, p := range c.Packets {
			total++
			if p.TX {
				tx++
			}
			if len(p.Homa) < 28 || p.IPLen != 20+len(p.Homa) {
				t.Errorf("%s: packet of %d Homa bytes, IP length %d", c.Name, len(p.Homa), p.IPLen)
			}
		}
	}
	if len(caps) != 15 || total != 1828 || tx == 0 || tx == total {
		t.Errorf("%d captures, %d Homa packets, %d from the peer; want 15, 1828, some from each side", len(caps), total, tx)
	}
	for name := range LogGaps {
		if !slices.Contains(names, name) {
			t.Errorf("LogGaps names %s, which is not a capture", name)
		}
	}
}
