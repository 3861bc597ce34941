package homa

// links are the fields an element of a dlist carries.
type links[T any] struct {
	prev, next *T
	listed     bool
}

// linked is a pointer to an element that carries links.
type linked[T any] interface {
	*T
	links() *links[T]
}

// dlist is an intrusive doubly linked FIFO: pushing and removing allocate
// nothing, and removal from the middle is O(1).
type dlist[T any, P linked[T]] struct{ head, tail *T }

func (l *dlist[T, P]) push(x *T) {
	n := P(x).links()
	n.prev, n.next, n.listed = l.tail, nil, true
	if l.tail != nil {
		P(l.tail).links().next = x
	} else {
		l.head = x
	}
	l.tail = x
}

// remove takes x out of the list; it does nothing if x is not listed.
func (l *dlist[T, P]) remove(x *T) {
	n := P(x).links()
	if !n.listed {
		return
	}
	if n.prev != nil {
		P(n.prev).links().next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		P(n.next).links().prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next, n.listed = nil, nil, false
}
