// Package ilist is an intrusive doubly linked list: elements carry their
// own links, one Links field per list they may be in, so pushing,
// moving and removing allocate nothing and take constant time. The
// protocol core keeps its queues of RPCs and peers in such lists, and
// the RPC layer its timers (a list kept in the order of addition is in
// the order of expiry when every entry waits as long).
package ilist

// Links are the fields an element carries for one list it may be in.
type Links[T any] struct {
	prev, next *T
	list       *List[T] // the list the element is in, or nil
}

// Listed reports whether the element is in a list (through these links).
func (k *Links[T]) Listed() bool { return k.list != nil }

// List is a FIFO of elements of type T; at selects the Links field of
// an element that this list uses. The zero List is not usable: make one
// with New.
type List[T any] struct {
	head, tail *T
	n          int
	at         func(*T) *Links[T]
}

// New returns an empty list using the links that at selects.
func New[T any](at func(*T) *Links[T]) List[T] { return List[T]{at: at} }

// Len returns the number of elements.
func (l *List[T]) Len() int { return l.n }

// Front returns the oldest element, or nil.
func (l *List[T]) Front() *T { return l.head }

// Next is the element after x, or nil.
func (l *List[T]) Next(x *T) *T { return l.at(x).next }

// Contains reports whether x is in l.
func (l *List[T]) Contains(x *T) bool { return l.at(x).list == l }

// PushBack appends x. It panics if x is in a list already (through the
// same links): an element is in one list of a kind at a time.
func (l *List[T]) PushBack(x *T) {
	k := l.at(x)
	if k.list != nil {
		panic("ilist: element already in a list")
	}
	k.prev, k.next, k.list = l.tail, nil, l
	if l.tail != nil {
		l.at(l.tail).next = x
	} else {
		l.head = x
	}
	l.tail = x
	l.n++
}

// Remove takes x out of l; it does nothing if x is not in l.
func (l *List[T]) Remove(x *T) {
	k := l.at(x)
	if k.list != l {
		return
	}
	if k.prev != nil {
		l.at(k.prev).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		l.at(k.next).prev = k.prev
	} else {
		l.tail = k.prev
	}
	k.prev, k.next, k.list = nil, nil, nil
	l.n--
}

// MoveToBack makes x the newest element of l, adding it if it is in no
// list.
func (l *List[T]) MoveToBack(x *T) {
	if l.tail == x {
		return
	}
	l.Remove(x)
	l.PushBack(x)
}
