package erpc

import "time"

// dlink is the link an element keeps for one dlist, with the time it was
// added. Every timer of the layer has a fixed duration, so a list kept in
// the order of addition is also in the order of expiry: the head is the
// next to expire, and adding, removing and finding the next expiry cost
// O(1). No timer per object, no heap.
type dlink[T any] struct {
	prev, next *T
	list       *dlist[T] // the list it is in, or nil
	at         time.Time
}

// dlist is an intrusive doubly linked list of *T, in the order elements
// were pushed.
type dlist[T any] struct {
	head, tail *T
	n          int
	link       func(*T) *dlink[T]
}

func newDlist[T any](link func(*T) *dlink[T]) dlist[T] { return dlist[T]{link: link} }

// push appends x, stamped at, unless it is already in the list. x must
// not be in another list that uses the same link.
func (l *dlist[T]) push(x *T, at time.Time) {
	k := l.link(x)
	if k.list == l {
		return
	}
	if k.list != nil {
		panic("erpc: element already in another list")
	}
	k.list, k.at, k.prev, k.next = l, at, l.tail, nil
	if l.tail != nil {
		l.link(l.tail).next = x
	} else {
		l.head = x
	}
	l.tail = x
	l.n++
}

// remove takes x out of the list, if it is there.
func (l *dlist[T]) remove(x *T) {
	k := l.link(x)
	if k.list != l {
		return
	}
	if k.prev != nil {
		l.link(k.prev).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		l.link(k.next).prev = k.prev
	} else {
		l.tail = k.prev
	}
	*k = dlink[T]{}
	l.n--
}

// repush moves x to the tail, stamped at.
func (l *dlist[T]) repush(x *T, at time.Time) {
	l.remove(x)
	l.push(x, at)
}

// front returns the head and its stamp, or nil.
func (l *dlist[T]) front() (*T, time.Time) {
	if l.head == nil {
		return nil, time.Time{}
	}
	return l.head, l.link(l.head).at
}

func (l *dlist[T]) len() int { return l.n }
