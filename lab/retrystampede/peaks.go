package retrystampede

import (
	"math"
	"slices"
	"time"

	"github.com/stampede-lab/stampede/retry"
)

// FixedPeak returns the largest number of arrivals in one window of width
// w, the windows being fixed and aligned to the start signal: [0, w),
// [w, 2w), … Only arrivals later than after count (offsets are from the
// start signal), so the first wave, which the clients make and which is
// the same under every policy, does not hide what the retries do. This is
// the published ParityPay write-up's reading: a histogram of arrivals, first second
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

// PeakModel is what a retry policy's schedule alone gives for the peak
// over w after ExcludeFirst: payments released at once, every attempt
// timing out after exactly timeout, attempt k+1 starting when attempt k
// timed out plus the policy's wait, no network time at all. It is the
// yardstick for a measured peak: a jittered policy's peak is a random
// number whose spread is set by the payments and the jitter window, not
// by the implementation.
type PeakModel struct {
	// Trials is how many stampedes were drawn.
	Trials int
	// P05, P50 and P95 are percentiles of the peak over the trials.
	P05, P50, P95 int
	// peaks holds every trial's peak, sorted.
	peaks []int
}

// AtMost returns the fraction of trials whose peak was at most n.
func (m PeakModel) AtMost(n float64) float64 {
	if len(m.peaks) == 0 {
		return 0
	}
	k, _ := slices.BinarySearch(m.peaks, int(math.Floor(n))+1)
	return float64(k) / float64(len(m.peaks))
}

// PeakFunc reads the peak over windows of width w of the arrivals later
// than after: SlidingPeak or FixedPeak.
type PeakFunc func(offsets []time.Duration, w, after time.Duration) int

// ModelPeaks draws trials stampedes of payments operations retried by
// policy (each attempt timing out after timeout) and returns their peaks
// as peak reads them over w, counting arrivals later than after. In the
// model the first wave leaves at 0 exactly, so fixed windows line up with
// the retry waves, the case where they split a wave least.
func ModelPeaks(policy retry.Policy, payments, trials int, timeout, w, after time.Duration, peak PeakFunc) PeakModel {
	peaks := make([]int, 0, trials)
	offsets := make([]time.Duration, 0, 4*payments)
	for range trials {
		offsets = offsets[:0]
		for range payments {
			seq, at := policy.Start(), time.Duration(0)
			for {
				offsets = append(offsets, at)
				wait, ok := seq.Next()
				if !ok {
					break
				}
				at += timeout + wait
			}
		}
		peaks = append(peaks, peak(offsets, w, after))
	}
	slices.Sort(peaks)
	m := PeakModel{Trials: trials, peaks: peaks}
	if trials > 0 {
		pick := func(q float64) int { return peaks[min(int(q*float64(trials)), trials-1)] }
		m.P05, m.P50, m.P95 = pick(0.05), pick(0.5), pick(0.95)
	}
	return m
}
