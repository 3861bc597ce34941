package erpc

import (
	"testing"
	"time"
	"unsafe"
)

// bigStore returns a large storage of n bytes of data.
func bigStore(n int) []byte { return make([]byte, maxHeaderLen+n) }

// TestPoolBig: the pool keeps freed large storages up to poolBigBytes,
// dropping smaller ones for larger, never one a class holds; it hands
// back the smallest that holds what is wanted, else the largest that
// holds what is needed; a large MsgBuffer and a message growing by
// writeAt take their storage from there.
func TestPoolBig(t *testing.T) {
	p := &bufPool{max: 32 << 20}
	p.putBig(bigStore(MaxMsgSize)) // a class's size: not kept
	p.putBig(bigStore(2 << 20))
	p.putBig(bigStore(4 << 20))
	p.putBig(bigStore(8 << 20))
	if p.bigBytes != 14<<20 || len(p.big) != 3 {
		t.Fatalf("%d bytes in %d storages, want 14 MiB in 3", p.bigBytes, len(p.big))
	}
	p.putBig(bigStore(8 << 20)) // the 2 and 4 MiB ones make room
	if p.bigBytes != 16<<20 || len(p.big) != 2 {
		t.Fatalf("%d bytes in %d storages, want 16 MiB in 2", p.bigBytes, len(p.big))
	}
	p.putBig(bigStore(4 << 20)) // smaller than every one kept
	p.putBig(bigStore(poolBigBytes + 1))
	if p.bigBytes != 16<<20 || len(p.big) != 2 {
		t.Fatalf("%d bytes in %d storages after refusals", p.bigBytes, len(p.big))
	}
	if b := p.takeBig(9<<20, 9<<20); b != nil {
		t.Fatalf("took %d bytes for 9 MiB", len(b)-maxHeaderLen)
	}

	p = &bufPool{max: 32 << 20}
	for _, n := range []int{2 << 20, 3 << 20, 6 << 20} {
		p.putBig(bigStore(n))
	}
	for _, c := range []struct{ need, want, got int }{
		{1 << 20, 2 << 20, 2 << 20}, // the smallest that holds want
		{1 << 20, 8 << 20, 6 << 20}, // none holds want: the largest
		{1 << 20, 8 << 20, 3 << 20},
		{4 << 20, 4 << 20, 0}, // none holds need
	} {
		b := p.takeBig(c.need, c.want)
		if len(b)-maxHeaderLen != c.got && !(b == nil && c.got == 0) {
			t.Fatalf("take(%d, %d): %d bytes, want %d", c.need, c.want, len(b)-maxHeaderLen, c.got)
		}
	}
	if p.bigBytes != 0 || len(p.big) != 0 {
		t.Fatalf("%d bytes left in %d storages", p.bigBytes, len(p.big))
	}

	// A large MsgBuffer comes from the pool and goes back to it.
	s := bigStore(3 << 20)
	p.putBig(s)
	m, err := p.get(2 << 20)
	if err != nil || unsafe.SliceData(m.buf) != unsafe.SliceData(s) || m.Len() != 2<<20 {
		t.Fatalf("get: %v, %d bytes, storage reused %v", err, m.Len(), unsafe.SliceData(m.buf) == unsafe.SliceData(s))
	}
	p.put(m)
	if len(p.big) != 1 || m.buf != nil {
		t.Fatalf("put: %d storages kept, buffer still holds one: %v", len(p.big), m.buf != nil)
	}

	// writeAt grows a message by doubling, or into a free storage.
	m, _ = p.get(0)
	m.writeAt(MaxMsgSize, make([]byte, 100), 4<<20) // from the pool: the 3 MiB storage
	if unsafe.SliceData(m.buf) != unsafe.SliceData(s) || m.Len() != MaxMsgSize+100 {
		t.Fatalf("writeAt: %d bytes, storage of %d", m.Len(), len(m.buf)-maxHeaderLen)
	}
	m.writeAt(3<<20, make([]byte, 10), 4<<20) // beyond it: doubled, at most the limit
	if len(m.buf)-maxHeaderLen != 4<<20 || m.Len() != 3<<20+10 || len(p.big) != 1 {
		t.Fatalf("writeAt beyond: %d bytes, storage of %d, %d storages kept", m.Len(), len(m.buf)-maxHeaderLen, len(p.big))
	}

	// take leaves a buffer empty but usable.
	store, data := m.take()
	if len(data) != 3<<20+10 || unsafe.SliceData(data) != unsafe.SliceData(store[maxHeaderLen:]) || m.Len() != 0 || m.MaxLen() != 0 {
		t.Fatalf("take: %d bytes, left %d/%d", len(data), m.Len(), m.MaxLen())
	}
	m.setData([]byte("small"))
	if string(m.Data()) != "small" {
		t.Fatalf("after take: %q", m.Data())
	}
}

// TestRecordStorage: a completion record keeps a large response's
// storage, not a copy, and gives it back to the pool when it lets the
// response go, but not while EnqueueResponse still sends from it: then
// when it is done.
func TestRecordStorage(t *testing.T) {
	pool := &bufPool{max: 8 << 20}
	var et eoTable
	et.init(&ExactlyOnceConfig{MaxRecords: 10, MaxRecordBytes: 64 << 20, MaxRecordsPerHost: 10, MaxRecordBytesPerHost: 64 << 20}, &counters{}, pool)
	cl := &eoClient{id: 1, host: &eoHost{}}
	cl.recs = newDlist(func(x *eoRecord) *dlink[eoRecord] { return &x.clLink })
	for _, dropFirst := range []bool{true, false} {
		store := bigStore(2 << 20)
		frame := store[maxHeaderLen-eoHeaderLen:]
		rec := &eoRecord{key: eoKey{1, 7}, cl: cl}
		et.recs[rec.key] = rec
		cl.recs.push(rec, time.Time{})
		et.reserved += recordReserve
		cl.host.recs++
		cl.host.reserved += recordReserve
		if _, kept := et.complete(rec, frame, store, time.Now()); !kept || unsafe.SliceData(rec.frame) != unsafe.SliceData(frame) {
			t.Fatalf("kept %v, a copy %v", kept, unsafe.SliceData(rec.frame) != unsafe.SliceData(frame))
		}
		if dropFirst {
			et.mu.Lock()
			et.deleteLocked(rec) // acknowledged while the reply is sent
			et.mu.Unlock()
			if len(pool.big) != 0 || et.bytes != 0 {
				t.Fatalf("storage recycled while sent from: %d kept, %d bytes", len(pool.big), et.bytes)
			}
			et.sent(rec)
		} else {
			et.sent(rec)
			if len(pool.big) != 0 {
				t.Fatal("storage recycled while the record holds it")
			}
			et.mu.Lock()
			et.tombstoneLocked(rec, time.Now())
			et.deleteLocked(rec)
			et.mu.Unlock()
		}
		b := pool.takeBig(1, 1)
		if unsafe.SliceData(b) != unsafe.SliceData(store) || et.bytes != 0 {
			t.Fatalf("drop first %v: storage not back in the pool (%d bytes counted)", dropFirst, et.bytes)
		}
	}
}
