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
	next := uint32(0) // every byte below next is covered
	for _, s := range have {
		if next >= limit {
			break
		}
		if s.End <= s.Start {
			continue
		}
		if s.Start > next {
			return Span{next, min(s.Start, limit)}, true
		}
		next = max(next, s.End)
	}
	if next < limit {
		return Span{next, limit}, true
	}
	return Span{}, false
}
