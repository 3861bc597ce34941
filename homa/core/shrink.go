package core

// Go maps keep the room of the most entries they ever held. A table
// that a burst of load filled and that then emptied moves, at a time
// its owner chooses (a timer, never a packet), to a map of its size.

// shrinkFloor is the peak below which a map is not worth moving.
const shrinkFloor = 64

// shrinkMap returns m, or a copy of it sized to its entries if it holds
// at most an eighth of peak (the most it held since it was last made),
// and the peak to remember for the map returned.
func shrinkMap[K comparable, V any](m map[K]V, peak int) (map[K]V, int) {
	peak = max(peak, len(m))
	if peak < shrinkFloor || len(m) > peak/8 {
		return m, peak
	}
	n := make(map[K]V, len(m))
	for k, v := range m {
		n[k] = v
	}
	return n, len(m)
}
