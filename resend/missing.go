package resend

// Span is a half-open byte range [Start, End) of a message.
type Span struct{ Start, End uint32 }

// Missing returns the first range of [0, limit) not covered by have, the
// range a RESEND should ask for, and false when every byte below limit
// has arrived. have lists the received ranges, sorted and disjoint
// (adjacent spans and empty spans are fine). limit is how far the
// receiver has granted: a RESEND never asks for bytes not granted.
//
// The returned range runs to the start of the next received span or to
// limit. If have is not sorted the result may include bytes already
// received, which is harmless; Missing never panics. It does not
// allocate.
func Missing(have []Span, limit uint32) (Span, bool) {
	var one [1]Span
	if g := Gaps(have, limit, one[:0]); len(g) > 0 {
		return g[0], true
	}
	return Span{}, false
}

// Gaps appends to dst the ranges of [0, limit) not covered by have
// (sorted, disjoint spans), in order, stopping when dst is full: a
// receiver asks for all of them at once, up to cap(dst), rather than one
// per round. It allocates nothing.
func Gaps(have []Span, limit uint32, dst []Span) []Span {
	next := uint32(0) // every byte below next is covered
	for _, s := range have {
		if next >= limit || len(dst) == cap(dst) {
			return dst
		}
		if s.End <= s.Start {
			continue
		}
		if s.Start > next {
			dst = append(dst, Span{next, min(s.Start, limit)})
		}
		next = max(next, s.End)
	}
	if next < limit && len(dst) < cap(dst) {
		dst = append(dst, Span{next, limit})
	}
	return dst
}
