package lab

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far the Runner has come. Progress output is best
// effort: write errors are ignored, because a broken progress stream must
// not lose the measurements.
type progress interface {
	experimentStarted(name string, total int)
	runStarted(s step)
	runFinished(s step, run Run)
	// experimentFinished is called with the result, or with nil when the
	// experiment was stopped.
	experimentFinished(res *Result)
}

// newProgress returns a progress bar for a terminal and plain lines
// otherwise.
func newProgress(w io.Writer, terminal bool) progress {
	if terminal {
		return &barProgress{w: w}
	}
	return &lineProgress{w: w}
}

// lineProgress prints one line when a run starts and one when it ends,
// which reads well in logs and CI output:
//
//	lab ordering: run 3/12 keyed hot_load=2.0 repeat 1/1 ...
//	lab ordering: run 3/12 keyed hot_load=2.0 repeat 1/1 done in 4.2s (valid)
type lineProgress struct {
	w    io.Writer
	name string // the experiment being run
}

func (p *lineProgress) experimentStarted(name string, total int) {
	p.name = name
	fmt.Fprintf(p.w, "lab %s: %d %s\n", name, total, plural(total, "run", "runs"))
}

func (p *lineProgress) runStarted(s step) {
	fmt.Fprintf(p.w, "lab %s ...\n", lineStep(s))
}

func (p *lineProgress) runFinished(s step, run Run) {
	elapsed := time.Duration(run.DurationMS * float64(time.Millisecond))
	fmt.Fprintf(p.w, "lab %s done in %.1fs (%s)\n", lineStep(s), elapsed.Seconds(), runStatus(run))
}

func (p *lineProgress) experimentFinished(res *Result) {
	if res == nil {
		fmt.Fprintf(p.w, "lab %s: stopped\n", p.name)
		return
	}
	fmt.Fprintf(p.w, "lab %s: %s\n", res.Experiment, res.Verdict())
}

// lineStep reads like "ordering: run 3/12 keyed hot_load=2.0 repeat 1/1".
func lineStep(s step) string {
	return fmt.Sprintf("%s: run %d/%d %s repeat %d/%d", s.experiment, s.n, s.total, s.label, s.repeat+1, s.repeats)
}

// runStatus is "valid", or says why the run is not.
func runStatus(run Run) string {
	var parts []string
	if !run.Valid {
		parts = append(parts, "invalid: "+run.Reason)
	}
	if len(run.Broken) > 0 {
		parts = append(parts, "broken: "+strings.Join(run.Broken, "; "))
	}
	if len(parts) == 0 {
		return "valid"
	}
	return strings.Join(parts, ", ")
}

// barProgress draws one progress bar per experiment, over its runs; the
// description shows the condition being run.
type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) experimentStarted(name string, total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("runs"),
	)
}

func (p *barProgress) runStarted(s step) {
	p.bar.Describe(fmt.Sprintf("%s: %s (repeat %d/%d)", s.experiment, s.label, s.repeat+1, s.repeats))
}

func (p *barProgress) runFinished(s step, run Run) {
	_ = p.bar.Add(1)
}

func (p *barProgress) experimentFinished(res *Result) {
	_ = p.bar.Exit()
	fmt.Fprintln(p.w)
	if res != nil && (!res.Valid || len(res.Failed()) > 0) {
		fmt.Fprintf(p.w, "lab %s: %s\n", res.Experiment, res.Verdict())
	}
}
