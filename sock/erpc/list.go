package erpc

import (
	"time"

	"github.com/homa-go/homa/internal/ilist"
)

// dlink is the link an element keeps for one dlist, with the time it was
// added. Every timer of the layer has a fixed duration, so a list kept in
// the order of addition is also in the order of expiry: the head is the
// next to expire, and adding, removing and finding the next expiry cost
// O(1). No timer per object, no heap.
type dlink[T any] struct {
	ilist.Links[T]
	at time.Time
}

// dlist is an intrusive doubly linked list of *T, in the order elements
// were pushed.
type dlist[T any] struct {
	ilist.List[T]
	link func(*T) *dlink[T]
}

func newDlist[T any](link func(*T) *dlink[T]) dlist[T] {
	return dlist[T]{List: ilist.New(func(x *T) *ilist.Links[T] { return &link(x).Links }), link: link}
}

// push appends x, stamped at, unless it is already in the list. x must
// not be in another list that uses the same link.
func (l *dlist[T]) push(x *T, at time.Time) {
	if l.Contains(x) {
		return
	}
	l.PushBack(x)
	l.link(x).at = at
}

// remove takes x out of the list, if it is there.
func (l *dlist[T]) remove(x *T) { l.Remove(x) }

// repush moves x to the tail, stamped at.
func (l *dlist[T]) repush(x *T, at time.Time) {
	l.Remove(x)
	l.push(x, at)
}

// front returns the head and its stamp, or nil.
func (l *dlist[T]) front() (*T, time.Time) {
	x := l.Front()
	if x == nil {
		return nil, time.Time{}
	}
	return x, l.link(x).at
}

func (l *dlist[T]) len() int { return l.Len() }
