package homa

import (
	"sync"
	"sync/atomic"
)

// recycler recycles values of one kind: one kept at hand, which is what
// a lone goroutine needs and costs less than the pool, the rest pooled.
type recycler[T any] struct {
	one  atomic.Pointer[T]
	pool sync.Pool
}

// get returns a recycled value, or nil.
func (r *recycler[T]) get() *T {
	if v := r.one.Swap(nil); v != nil {
		return v
	}
	v, _ := r.pool.Get().(*T)
	return v
}

// put gives v back for reuse.
func (r *recycler[T]) put(v *T) {
	if !r.one.CompareAndSwap(nil, v) {
		r.pool.Put(v)
	}
}
