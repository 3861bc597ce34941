package homa

import (
	"sync"
	"sync/atomic"

	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/priority"
)

// SharedCutoffs is one priority estimator for the cores of several
// endpoints, the shards of one socket (core.Config.Estimator): they
// learn the unscheduled cutoffs from all the socket's traffic, as one
// core would, rather than each from its share (N shards would take N
// times as long to leave the defaults), and announce the same cutoffs
// under the same versions. Each shard records its messages in a batch
// of its own and adds the batch to the shared estimator, under a lock,
// once it holds cutoffBatch of them: one lock per cutoffBatch messages,
// never one on a packet's path. What the cutoffs are, every shard reads
// without a lock.
type SharedCutoffs struct {
	mu  sync.Mutex
	est *priority.Estimator // under mu
	cur atomic.Pointer[cutoffsNow]
}

// cutoffsNow is what SharedCutoffs' estimator answered last.
type cutoffsNow struct {
	cut   priority.Cutoffs
	sched int
}

// cutoffBatch is how many messages a shard records before it adds them
// to the shared estimator: a delay of a few messages in the estimate's
// thousand (priority.DefaultMinMessages).
const cutoffBatch = 16

// NewSharedCutoffs returns the estimator of cfg shared by shards.
func NewSharedCutoffs(cfg priority.EstimatorConfig) *SharedCutoffs {
	s := &SharedCutoffs{est: priority.NewEstimator(cfg)}
	c, n := s.est.Cutoffs()
	s.cur.Store(&cutoffsNow{c, n})
	return s
}

// Shard returns the Estimator for one shard's core. A shard's Estimator
// is used under its core's caller's lock, as the core's own would be.
func (s *SharedCutoffs) Shard() core.Estimator { return &cutoffShard{s: s} }

// Cutoffs returns the shared cutoffs in force and the number of
// scheduled levels.
func (s *SharedCutoffs) Cutoffs() (priority.Cutoffs, int) {
	now := s.cur.Load()
	return now.cut, now.sched
}

// add records a shard's batch of messages.
func (s *SharedCutoffs) add(batch []recorded) {
	s.mu.Lock()
	for _, r := range batch {
		s.est.Record(r.length, r.unsched)
	}
	c, n := s.est.Cutoffs()
	s.mu.Unlock()
	if now := s.cur.Load(); now.cut != c || now.sched != n {
		s.cur.Store(&cutoffsNow{c, n})
	}
}

// recorded is a message a shard recorded.
type recorded struct{ length, unsched uint32 }

// cutoffShard is a shard's Estimator: its batch, and the shared one.
type cutoffShard struct {
	s     *SharedCutoffs
	batch [cutoffBatch]recorded
	n     int
}

// Record implements core.Estimator.
func (h *cutoffShard) Record(length, unschedBytes uint32) {
	h.batch[h.n] = recorded{length, unschedBytes}
	if h.n++; h.n == len(h.batch) {
		h.s.add(h.batch[:])
		h.n = 0
	}
}

// Cutoffs implements core.Estimator.
func (h *cutoffShard) Cutoffs() (priority.Cutoffs, int) { return h.s.Cutoffs() }
