package soak

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/lab/sale"
)

// sampler records the soak's series every Sample period.
type sampler struct {
	rig   *sale.Rig
	tol   map[string]Tolerance
	start time.Time
	rdb   *redis.Client
	nc    *nats.Conn
	js    jetstream.JetStream
	pg    map[string]*sql.DB // part → its database, on PostgreSQL
	hc    *http.Client
	// sharedRedis: the Redis is a real server, whose database others may
	// use too.
	sharedRedis bool

	mu     sync.Mutex
	order  []string
	series map[string]*Series
	errors map[string]int
	exited map[string]bool
}

// newSampler connects to the rig's Redis, NATS and databases.
func newSampler(rig *sale.Rig, tol map[string]Tolerance, start time.Time, sharedRedis bool) (*sampler, error) {
	s := &sampler{rig: rig, tol: tol, start: start, series: map[string]*Series{}, errors: map[string]int{}, exited: map[string]bool{},
		pg: map[string]*sql.DB{}, hc: &http.Client{Timeout: 2 * time.Second}, sharedRedis: sharedRedis}
	opts, err := redis.ParseURL(rig.RedisURL())
	if err != nil {
		return nil, fmt.Errorf("soak: the Redis URL: %w", err)
	}
	s.rdb = redis.NewClient(opts)
	if s.nc, err = nats.Connect(rig.NATSURL(), nats.Timeout(5*time.Second)); err != nil {
		s.close()
		return nil, fmt.Errorf("soak: NATS: %w", err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.close()
		return nil, err
	}
	for _, st := range rig.Stores() {
		if st.Postgres == "" {
			continue
		}
		db, err := sql.Open("pgx", st.Postgres)
		if err != nil {
			s.close()
			return nil, err
		}
		db.SetMaxOpenConns(1)
		s.pg[st.Part] = db
	}
	return s, nil
}

func (s *sampler) close() {
	if s.rdb != nil {
		s.rdb.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, db := range s.pg {
		db.Close()
	}
}

// run samples every period until ctx ends.
func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	s.sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample(ctx)
		}
	}
}

// add appends one value to the series name, making it on first use.
func (s *sampler) add(name, family, unit string, judged bool, t, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr, ok := s.series[name]
	if !ok {
		sr = &Series{Name: name, Family: family, Unit: unit, Judged: judged, Tolerance: s.tol[family]}
		s.series[name] = sr
		s.order = append(s.order, name)
	}
	sr.Points = append(sr.Points, Sample{T: t, V: v})
}

// addRSS records a process's resident memory, judged. Beside the rig's
// own nats-server's it reports the size of the stream's current message
// block: nats-server keeps the block it appends to in a write cache
// that moves to larger buffers as the block fills (256 KiB, 1, 4, then
// 8 MiB, the block's size under the pay stream's limits) until the block
// is full and the next one begins, so its memory steps up through the
// first block (about an hour at the soak's default rate) by design. The
// block's size, read from its file, tells such a step from a leak.
func (s *sampler) addRSS(part string, t float64, rss int64) {
	s.add(part+" rss", FamilyRSS, "bytes", true, t, float64(rss))
	dir := s.rig.NATSStoreDir()
	if part != "nats" || dir == "" {
		return
	}
	if blk, err := currentBlock(dir, s.rig.Stream()); err == nil {
		s.add(part+" stream's current block", "nats_block", "bytes", false, t, float64(blk))
	} else {
		s.fail(part + " current block")
	}
}

// currentBlock is the size of the newest message block file of stream
// in the JetStream directory dir (<dir>/jetstream/<account>/streams/
// <stream>/msgs/<n>.blk: the highest n is the block being appended to).
func currentBlock(dir, stream string) (int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	if err != nil {
		return 0, err
	}
	best, size := -1, int64(0)
	for _, f := range files {
		n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".blk"))
		if err != nil || n <= best {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		best, size = n, fi.Size()
	}
	if best < 0 {
		return 0, fmt.Errorf("no message block of stream %s under %s", stream, dir)
	}
	return size, nil
}

// fail counts a reading that failed, by what was read.
func (s *sampler) fail(what string) {
	s.mu.Lock()
	s.errors[what]++
	s.mu.Unlock()
}

// all returns a copy of every series in the order they appeared.
func (s *sampler) all() []Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Series, 0, len(s.order))
	for _, n := range s.order {
		sr := *s.series[n]
		sr.Points = append([]Sample(nil), sr.Points...)
		out = append(out, sr)
	}
	return out
}

// sample takes one sample of everything.
func (s *sampler) sample(ctx context.Context) {
	t := time.Since(s.start).Seconds()
	for _, p := range s.rig.Parts() {
		if p.Exited {
			s.mu.Lock()
			s.exited[p.Name] = true
			s.mu.Unlock()
			continue
		}
		if p.PID == 0 {
			continue
		}
		if rss, err := rssOf(p.PID); err == nil {
			s.addRSS(p.Name, t, rss)
		} else {
			s.fail(p.Name + " rss")
		}
		if n, err := openFiles(p.PID); err == nil {
			s.add(p.Name+" open files", FamilyFiles, "files", true, t, float64(n))
		} else {
			s.fail(p.Name + " open files")
		}
		if p.Metrics != "" {
			if m, err := s.scrape(ctx, p.Metrics, p.MetricsAuth); err == nil {
				s.add(p.Name+" goroutines", FamilyGoroutines, "goroutines", true, t, m.goroutines)
				s.add(p.Name+" heap in use", FamilyHeap, "bytes", true, t, m.heapInuse)
				// Reported: what the resident memory holds beside the
				// heap in use.
				s.add(p.Name+" heap kept, free", FamilyRuntime, "bytes", false, t, m.heapIdle-m.heapReleased)
				s.add(p.Name+" stacks", FamilyRuntime, "bytes", false, t, m.stackInuse)
			} else {
				s.fail(p.Name + " metrics")
			}
		}
	}
	if la, err := loadAverage(); err == nil {
		s.add("machine load (1 min)", "load", "runnable", false, t, la)
	}

	// Redis: the keys of the database and the room's memory, which are
	// the run's own; the server's used_memory is reported (on a shared
	// server it is everyone's).
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if n, err := s.rdb.DBSize(rctx).Result(); err == nil {
		// On a real server the database may be shared: judged only on
		// the run's own server.
		s.add("redis keys", FamilyRedisKeys, "keys", !s.sharedRedis, t, float64(n))
	} else {
		s.fail("redis keys")
	}
	// The room's admission log keeps every admission (its record, like
	// the databases' payments): judged per entry, and left out of the
	// room's memory, which must stay flat.
	var room int64
	ok := true
	logKey := s.rig.RoomLogKey()
	for _, k := range s.rig.RoomKeys() {
		n, err := s.rdb.MemoryUsage(rctx, k).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			ok = false
			break
		}
		if k == logKey {
			if entries, err := s.rdb.LLen(rctx, k).Result(); err == nil && entries > 0 {
				s.add("admission log per entry", FamilyLogEntry, "bytes/entry", true, t, float64(n)/float64(entries))
				s.add("admission log", "log_bytes", "bytes", false, t, float64(n))
			}
			continue
		}
		room += n
	}
	if ok {
		s.add("redis room memory (without the log)", FamilyRedisBytes, "bytes", true, t, float64(room))
	}
	if info, err := s.rdb.InfoMap(rctx, "memory").Result(); err == nil {
		if v, err := strconv.ParseFloat(info["Memory"]["used_memory"], 64); err == nil {
			s.add("redis used_memory (server)", "redis_server", "bytes", false, t, v)
		}
	}
	cancel()

	// The stores and the stream, per payment: they keep every record, so
	// their size follows the sale; what must not grow is their size per
	// payment.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	payments, err := s.rig.Payments(pctx)
	cancel()
	if err != nil {
		s.fail("payments")
		payments = 0
	}
	for _, st := range s.rig.Stores() {
		var size int64
		if st.SQLite != "" {
			size = fileSize(st.SQLite) + fileSize(st.SQLite+"-wal")
		} else {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := s.pg[st.Part].QueryRowContext(qctx, "SELECT pg_database_size($1)", st.Database).Scan(&size)
			cancel()
			if err != nil {
				s.fail(st.Part + " database size")
				continue
			}
		}
		s.add(st.Part+" database", "store_bytes", "bytes", false, t, float64(size))
		if payments > 0 {
			s.add(st.Part+" database per payment", FamilyStore, "bytes/payment", true, t, float64(size)/float64(payments))
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if str, err := s.js.Stream(sctx, s.rig.Stream()); err == nil {
		if info, err := str.Info(sctx); err == nil {
			s.add("stream", "stream_bytes", "bytes", false, t, float64(info.State.Bytes))
			s.add("stream messages", "stream_msgs", "messages", false, t, float64(info.State.Msgs))
			if payments > 0 {
				s.add("stream per payment", FamilyStream, "bytes/payment", true, t, float64(info.State.Bytes)/float64(payments))
			}
		} else {
			s.fail("stream")
		}
	} else {
		s.fail("stream")
	}
	cancel()
	if payments > 0 {
		s.add("payments", "payments", "payments", false, t, float64(payments))
	}
}

// scraped is what a scrape reads of a Go process's runtime: its
// goroutines and heap in use (judged), and where the rest of its memory
// is (reported, to tell a heap that grows from a runtime that keeps what
// it freed): heap memory freed but not returned to the OS, and stacks.
type scraped struct {
	goroutines, heapInuse, heapIdle, heapReleased, stackInuse float64
}

// scrapedMetrics names the Prometheus series scrape reads into scraped.
var scrapedMetrics = []string{
	"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
	"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes",
}

// scrape reads a Go process's runtime figures from a Prometheus endpoint,
// sending auth as its Authorization (if not empty).
func (s *sampler) scrape(ctx context.Context, u, auth string) (scraped, error) {
	var out scraped
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return out, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	dst := []*float64{&out.goroutines, &out.heapInuse, &out.heapIdle, &out.heapReleased, &out.stackInuse}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := 0
	for sc.Scan() {
		for i, name := range scrapedMetrics {
			v, ok := strings.CutPrefix(sc.Text(), name+" ")
			if !ok {
				continue
			}
			if *dst[i], err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return out, err
			}
			found++
		}
	}
	if found < len(scrapedMetrics) {
		return out, fmt.Errorf("soak: %d of the series %s missing at %s (%s)", len(scrapedMetrics)-found, strings.Join(scrapedMetrics, ", "), u, resp.Status)
	}
	return out, nil
}

// rssOf is a process's resident set size in bytes (VmRSS).
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("soak: no VmRSS for %d", pid)
}

// openFiles counts a process's open file descriptors.
func openFiles(pid int) (int, error) {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(es), err
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("soak: empty /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// fileSize is a file's size, 0 when it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
