package retrystampede

import (
	"slices"
	"time"
)

// FixedPeak returns the largest number of arrivals in one window of width
// w, the windows being fixed and aligned to the start signal: [0, w),
// [w, 2w), … Only arrivals later than after count (offsets are from the
// start signal), so the first wave, which the clients make and which is
// the same under every policy, does not hide what the retries do. This is
// the seed write-up's reading: a histogram of arrivals, first second
// excluded.
func FixedPeak(offsets []time.Duration, w, after time.Duration) int {
	if w <= 0 {
		return 0
	}
	counts := map[int64]int{}
	peak := 0
	for _, o := range offsets {
		if o <= after {
			continue
		}
		k := int64(o / w)
		counts[k]++
		peak = max(peak, counts[k])
	}
	return peak
}

// SlidingPeak returns the largest number of arrivals in any half-open
// window [t, t+w), wherever it starts, over the arrivals later than
// after. It is at least FixedPeak and never splits a burst that a window
// boundary happens to cut.
func SlidingPeak(offsets []time.Duration, w, after time.Duration) int {
	if w <= 0 {
		return 0
	}
	var xs []time.Duration
	for _, o := range offsets {
		if o > after {
			xs = append(xs, o)
		}
	}
	slices.Sort(xs)
	peak, lo := 0, 0
	for hi, x := range xs {
		for xs[lo] <= x-w {
			lo++
		}
		peak = max(peak, hi-lo+1)
	}
	return peak
}

// Histogram counts every arrival (the first wave included) per window of
// width w from the start signal to the last arrival: element k counts
// [k·w, (k+1)·w). An arrival before the start, which cannot happen unless
// the clock steps back, counts in window 0.
func Histogram(offsets []time.Duration, w time.Duration) []int {
	if w <= 0 || len(offsets) == 0 {
		return nil
	}
	last := slices.Max(offsets)
	out := make([]int, max(int(last/w), 0)+1)
	for _, o := range offsets {
		k := max(int(o/w), 0)
		out[k]++
	}
	return out
}
