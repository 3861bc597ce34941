package core

import "github.com/homa-go/homa/internal/ilist"

// The core's queues of RPCs and peers are intrusive lists.
type (
	links[T any] = ilist.Links[T]
	list[T any]  = ilist.List[T]
)

func newList[T any](at func(*T) *links[T]) list[T] { return ilist.New(at) }
