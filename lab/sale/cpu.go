package sale

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter measures the CPU the lab's own process (the crowd, the
// sampler, the faults) used during the sale against the CPU of the parts
// it runs, so that a report whose rig starved the system under test says
// so instead of passing it off as the product's figure.
type cpuMeter struct {
	r          *rig
	start      time.Time
	self0      time.Duration
	parts0     map[int]time.Duration
	self, wall time.Duration
	parts      time.Duration
}

// startCPU starts measuring.
func startCPU(r *rig) *cpuMeter {
	m := &cpuMeter{r: r, start: time.Now(), self0: selfCPU(), parts0: map[int]time.Duration{}}
	for _, pid := range r.pids() {
		m.parts0[pid] = pidCPU(pid)
	}
	return m
}

// stop ends the measurement. A part killed and started again during the
// sale counts from its new start (the CPU of the killed one is lost): the
// parts' figure is a lower bound.
func (m *cpuMeter) stop() {
	m.wall, m.self = time.Since(m.start), selfCPU()-m.self0
	for _, pid := range m.r.pids() {
		m.parts += pidCPU(pid) - m.parts0[pid]
	}
}

// share is the lab's part of the CPU the lab and the parts used.
func (m *cpuMeter) share() float64 {
	if m.self+m.parts <= 0 {
		return 0
	}
	return float64(m.self) / float64(m.self+m.parts)
}

// String says what was measured.
func (m *cpuMeter) String() string {
	return fmt.Sprintf("the lab process used %.2f cores over %.0fs (%.0f %% of the CPU of the lab and its parts; parts %.2f cores)",
		m.self.Seconds()/m.wall.Seconds(), m.wall.Seconds(), 100*m.share(), m.parts.Seconds()/m.wall.Seconds())
}

// pids are the current process IDs of the rig's parts.
func (r *rig) pids() []int {
	var out []int
	for _, p := range r.procs {
		p.mu.Lock()
		if p.cur != nil {
			out = append(out, p.cur.pid)
		}
		p.mu.Unlock()
	}
	return out
}

// selfCPU is the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is the CPU time (user and system) process pid has used, from
// /proc/<pid>/stat (in clock ticks of 10 ms); 0 if it is gone.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}
