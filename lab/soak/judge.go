package soak

import (
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Sample is one value of a series, T seconds after the soak began.
type Sample struct {
	T float64 `json:"t"`
	V float64 `json:"v"`
}

// Tolerance is how much a series may grow in an hour: the larger of
// Relative times its mean after the warm-up and Absolute (in its unit).
type Tolerance struct {
	Relative float64 `json:"relative"`
	Absolute float64 `json:"absolute"`
}

// Allowed is the growth an hour allowed to a series of the given mean.
func (t Tolerance) Allowed(mean float64) float64 {
	return max(t.Relative*math.Abs(mean), t.Absolute)
}

// Series is one measured quantity over the soak.
type Series struct {
	// Name says what and of which part, as "pay rss".
	Name string `json:"name"`
	// Family groups the series drawn in one chart, as "rss".
	Family string `json:"family"`
	Unit   string `json:"unit"`
	// Judged is false for a series that is only reported (a shared
	// server's memory, a raw size whose per-payment figure is judged).
	Judged    bool      `json:"judged"`
	Tolerance Tolerance `json:"tolerance"`
	Points    []Sample  `json:"points"`
}

// Verdict is the judgement of one series after the warm-up.
type Verdict struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	Unit   string `json:"unit"`
	// Samples counts the points after the warm-up the slope was fitted
	// to, over Window seconds.
	Samples int     `json:"samples"`
	Window  float64 `json:"window_s"`
	// Mean, First and Last are the mean and the first and last values
	// after the warm-up.
	Mean  float64 `json:"mean"`
	First float64 `json:"first"`
	Last  float64 `json:"last"`
	// SlopePerHour is the least-squares slope of the values after the
	// warm-up, in unit per hour; Allowed the growth an hour the
	// tolerance allows at that mean.
	SlopePerHour float64 `json:"slope_per_hour"`
	Allowed      float64 `json:"allowed_per_hour"`
	// Judged reports whether the slope was judged: a series that is
	// only reported, or whose window is too short to tell, is not
	// (Reason says why).
	Judged bool   `json:"judged"`
	Grows  bool   `json:"grows"`
	Reason string `json:"reason,omitempty"`
}

// String says what the verdict found.
func (v Verdict) String() string {
	return fmt.Sprintf("%s grows %s %s/h (allowed %s; mean %s)", v.Name, human(v.SlopePerHour, v.Unit), v.Unit, human(v.Allowed, v.Unit), human(v.Mean, v.Unit))
}

// MinSamples is the fewest points after the warm-up a slope is judged on.
const MinSamples = 10

// Judge fits a least-squares line to the points of s after warmup
// seconds and judges its slope: the series grows when the slope in an
// hour exceeds its tolerance at its mean. A falling series never grows.
// A series with fewer than MinSamples points after the warm-up, or a
// window shorter than minWindow, is reported and not judged.
func Judge(s Series, warmup float64, minWindow time.Duration) Verdict {
	v := Verdict{Name: s.Name, Family: s.Family, Unit: s.Unit}
	var xs, ys []float64
	for _, p := range s.Points {
		if p.T >= warmup && !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
			xs = append(xs, p.T/3600)
			ys = append(ys, p.V)
		}
	}
	v.Samples = len(xs)
	if len(xs) == 0 {
		v.Reason = "no sample after the warm-up"
		return v
	}
	v.Window = (xs[len(xs)-1] - xs[0]) * 3600
	v.First, v.Last = ys[0], ys[len(ys)-1]
	v.Mean = stat.Mean(ys, nil)
	v.Allowed = s.Tolerance.Allowed(v.Mean)
	if len(xs) >= 2 && xs[len(xs)-1] > xs[0] {
		_, v.SlopePerHour = stat.LinearRegression(xs, ys, nil, false)
	}
	switch {
	case !s.Judged:
		v.Reason = "reported, not judged"
	case len(xs) < MinSamples:
		v.Reason = fmt.Sprintf("%d samples after the warm-up, fewer than %d: not judged", len(xs), MinSamples)
	case v.Window < minWindow.Seconds():
		v.Reason = fmt.Sprintf("%.0f s after the warm-up, shorter than %s: not judged", v.Window, minWindow)
	default:
		v.Judged = true
		v.Grows = v.SlopePerHour > v.Allowed
	}
	return v
}

// human formats x in unit: bytes with a binary prefix.
func human(x float64, unit string) string {
	a := math.Abs(x)
	if unit != "bytes" {
		if a >= 100 {
			return fmt.Sprintf("%.0f", x)
		}
		return fmt.Sprintf("%.3g", x)
	}
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", x/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case a >= 10<<10:
		return fmt.Sprintf("%.0f KiB", x/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", x)
	}
}
