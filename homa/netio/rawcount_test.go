package netio

import (
	"strings"
	"testing"
)

// TestCountRawProto reads tables as /proc/net/raw and raw6 print them:
// only the sockets whose protocol (the local port column) is 146 count.
func TestCountRawProto(t *testing.T) {
	raw := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 00000000:0001 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 101 2 0000000000000000 0
146: 00000000:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 102 2 0000000000000000 0
146: 0100007F:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 103 2 0000000000000000 0
253: 00000000:00FD 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 104 2 0000000000000000 0
`
	raw6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
146: 00000000000000000000000000000000:0092 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 105 2 0000000000000000 0
`
	for _, tt := range []struct {
		table string
		want  int
	}{{raw, 2}, {raw6, 1}, {"", 0}, {"header only\n", 0}, {"header\nbroken line\n146: nocolon x\n", 0}} {
		if n, err := countRawProto(strings.NewReader(tt.table), 146); n != tt.want || err != nil {
			t.Errorf("countRawProto(%.40q...) = %d, %v; want %d", tt.table, n, err, tt.want)
		}
	}
}
