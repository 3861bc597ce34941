package netrpc

import (
	"bytes"
	"testing"
)

// An outMsg holds what is written to it in its buffer up to one Homa
// message, and beyond in parts of partData bytes after room for their
// headers, however the writes are cut; past its limit it keeps nothing.
func TestOutMsg(t *testing.T) {
	for _, n := range []int{1, homaMax, homaMax + 1, 2 * partData, 2*partData + 1, 5*partData + 77} {
		msg := testMessage(n)
		for _, cuts := range [][]int{{n}, {7, n}, {homaMax - 3, n}, {partData, partData + 1, n}, {1000, 2000, homaMax + 5, n}} {
			o := newOutMsg(8 << 20)
			from := 0
			for _, c := range cuts {
				c = min(c, n)
				o.Write(msg[from:c])
				from = c
			}
			if o.n != n || o.tooLong() {
				t.Fatalf("%d bytes cut at %v: counted %d, too long %v", n, cuts, o.n, o.tooLong())
			}
			if n <= homaMax {
				if o.parts != nil || !bytes.Equal(o.head.Bytes(), msg) {
					t.Errorf("%d bytes cut at %v: %d parts, buffer equal %v", n, cuts, len(o.parts), bytes.Equal(o.head.Bytes(), msg))
				}
				continue
			}
			var got []byte
			for i, p := range o.parts {
				if i < len(o.parts)-1 && len(p) != homaMax {
					t.Errorf("%d bytes cut at %v: part %d of %d bytes", n, cuts, i, len(p))
				}
				got = append(got, p[partHeaderLen:]...)
			}
			if !bytes.Equal(got, msg) || o.head.Len() != 0 {
				t.Errorf("%d bytes cut at %v: parts hold %d bytes, equal %v; %d left in the buffer", n, cuts, len(got), bytes.Equal(got, msg), o.head.Len())
			}
			o.release()
		}
	}
	o := newOutMsg(3 << 20)
	o.Write(make([]byte, 3<<20+1))
	if !o.tooLong() || len(o.parts) != 0 {
		t.Errorf("past the limit: too long %v, %d parts kept", o.tooLong(), len(o.parts))
	}
}
