package ilist

import (
	"slices"
	"testing"
)

type elem struct {
	v    int
	a, b Links[elem]
}

func order(l *List[elem]) []int {
	var got []int
	for x := l.Front(); x != nil; x = l.Next(x) {
		got = append(got, x.v)
	}
	return got
}

// TestList: FIFO order through pushes, removals from the front, middle
// and back, moves to the back; an element in two lists through two
// links; removal from a list the element is not in changes nothing;
// a second push through the same links panics.
func TestList(t *testing.T) {
	la := New(func(e *elem) *Links[elem] { return &e.a })
	lb := New(func(e *elem) *Links[elem] { return &e.b })
	lc := New(func(e *elem) *Links[elem] { return &e.a })
	es := make([]*elem, 5)
	for i := range es {
		es[i] = &elem{v: i}
		la.PushBack(es[i])
	}
	lb.PushBack(es[3])
	if got := order(&la); !slices.Equal(got, []int{0, 1, 2, 3, 4}) || la.Len() != 5 {
		t.Fatalf("after pushes: %v (len %d)", got, la.Len())
	}
	la.Remove(es[0])
	la.Remove(es[2])
	la.Remove(es[4])
	la.MoveToBack(es[1])
	lc.Remove(es[3]) // not in lc: nothing happens
	if got := order(&la); !slices.Equal(got, []int{3, 1}) || la.Len() != 2 {
		t.Fatalf("after removals and a move: %v (len %d)", got, la.Len())
	}
	if !la.Contains(es[3]) || lc.Contains(es[3]) || !es[3].b.Listed() || es[0].a.Listed() {
		t.Fatal("membership wrong")
	}
	if got := order(&lb); !slices.Equal(got, []int{3}) {
		t.Fatalf("second list: %v", got)
	}
	lc.MoveToBack(es[0]) // in no list: added
	if got := order(&lc); !slices.Equal(got, []int{0}) {
		t.Fatalf("MoveToBack of an unlisted element: %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second push through the same links did not panic")
		}
	}()
	lc.PushBack(es[1])
}
