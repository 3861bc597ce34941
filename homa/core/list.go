package core

// links are the fields an element carries for one list it may be in.
type links[T any] struct {
	prev, next *T
	listed     bool
}

// list is an intrusive doubly linked FIFO: pushing, moving and removing
// allocate nothing and take constant time. An element may be in several
// lists, one per links field; at selects the field of this list.
type list[T any] struct {
	head, tail *T
	n          int
	at         func(*T) *links[T]
}

func newList[T any](at func(*T) *links[T]) list[T] { return list[T]{at: at} }

func (l *list[T]) len() int { return l.n }

// pushBack appends x, which must not be in the list.
func (l *list[T]) pushBack(x *T) {
	n := l.at(x)
	n.prev, n.next, n.listed = l.tail, nil, true
	if l.tail != nil {
		l.at(l.tail).next = x
	} else {
		l.head = x
	}
	l.tail = x
	l.n++
}

// remove takes x out of the list; it does nothing if x is not listed.
func (l *list[T]) remove(x *T) {
	n := l.at(x)
	if !n.listed {
		return
	}
	if n.prev != nil {
		l.at(n.prev).next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		l.at(n.next).prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next, n.listed = nil, nil, false
	l.n--
}

// moveToBack makes x the newest element, adding it if it is not listed.
func (l *list[T]) moveToBack(x *T) {
	if l.tail == x {
		return
	}
	l.remove(x)
	l.pushBack(x)
}

// next is the element after x, or nil.
func (l *list[T]) next(x *T) *T { return l.at(x).next }
