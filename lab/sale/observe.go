package sale

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Point is one sample of the sale's time series, T seconds after opening.
type Point struct {
	T             float64 `json:"t"`
	Waiting       float64 `json:"waiting"`
	Active        float64 `json:"active"`
	AdmittedTotal float64 `json:"admitted_total"`
	AdmissionRate float64 `json:"admission_rate_per_s"`
	SeatsLeft     float64 `json:"seats_left"`
	Sold          float64 `json:"sold"`
	// CheckoutHeld counts the distinct buyers with an unexpired hold, held
	// or being paid for: each holds an admission (a hold ends with its
	// admission, and the gate releases an admission only once the order
	// ended), so it never exceeds the room's capacity.
	CheckoutHeld float64            `json:"checkout_buyers"`
	Payments     map[string]float64 `json:"payments"`
	Outbox       float64            `json:"outbox"`
	ConsumerLag  float64            `json:"consumer_lag"`
}

// Mark is a fault, from its start to its end, in seconds after opening.
type Mark struct {
	Fault string  `json:"fault"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
}

// dbs are the lab's own read connections to the parts' databases.
type dbs struct {
	pg                    bool
	pay, checkout, fulfil *sql.DB
	payURL, coURL, fulURL string
	sqlitePay, sqliteCo   string
	sqliteFul             string
	closeOnce             sync.Once
}

// openDBs opens read connections to the run's databases (directly, not
// through the cut proxy).
func (r *rig) openDBs() (*dbs, error) {
	d := &dbs{pg: r.cfg.Postgres != ""}
	open := func(part string) (*sql.DB, string, error) {
		if d.pg {
			u, _ := url.Parse(r.pgDBs[part])
			base, _ := url.Parse(r.cfg.Postgres)
			u.Host = base.Host
			db, err := sql.Open("pgx", u.String())
			return db, u.String(), err
		}
		path := filepath.Join(r.dir, part+".db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(2000)")
		return db, path, err
	}
	var err error
	if d.pay, d.payURL, err = open("pay"); err != nil {
		return nil, err
	}
	if d.checkout, d.coURL, err = open("checkout"); err != nil {
		return nil, err
	}
	if d.fulfil, d.fulURL, err = open("fulfilment"); err != nil {
		return nil, err
	}
	if !d.pg {
		d.sqlitePay, d.sqliteCo, d.sqliteFul = d.payURL, d.coURL, d.fulURL
	}
	for _, db := range []*sql.DB{d.pay, d.checkout, d.fulfil} {
		db.SetMaxOpenConns(2)
	}
	return d, nil
}

func (d *dbs) close() {
	d.closeOnce.Do(func() {
		d.pay.Close()
		d.checkout.Close()
		d.fulfil.Close()
	})
}

// q picks the query of the dialect: SQLite's, or PostgreSQL's.
func (d *dbs) q(sqlite, pg string) string {
	if d.pg {
		return pg
	}
	return sqlite
}

// at encodes a time as the stores do: UnixMicro in SQLite.
func (d *dbs) at(t time.Time) any {
	if d.pg {
		return t
	}
	return t.UnixMicro()
}

// sampler records the sale's series every period.
type sampler struct {
	r      *rig
	d      *dbs
	opened time.Time
	mu     sync.Mutex
	points []Point
	errors int
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := s.sample(ctx)
		s.mu.Lock()
		s.points = append(s.points, p)
		s.mu.Unlock()
	}
}

// sample takes one point; a part that does not answer leaves its fields
// at the last value (and counts an error).
func (s *sampler) sample(ctx context.Context) Point {
	p := Point{T: time.Since(s.opened).Seconds(), Payments: map[string]float64{}}
	s.mu.Lock()
	if n := len(s.points); n > 0 {
		last := s.points[n-1]
		p.Waiting, p.Active, p.AdmittedTotal, p.AdmissionRate = last.Waiting, last.Active, last.AdmittedTotal, last.AdmissionRate
		p.SeatsLeft, p.Sold, p.Outbox, p.ConsumerLag = last.SeatsLeft, last.Sold, last.Outbox, last.ConsumerLag
		for k, v := range last.Payments {
			p.Payments[k] = v
		}
	}
	s.mu.Unlock()
	fail := func() {
		s.mu.Lock()
		s.errors++
		s.mu.Unlock()
	}
	part := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	var room struct {
		Active        float64 `json:"active"`
		Waiting       float64 `json:"waiting"`
		AdmittedTotal float64 `json:"admitted_total"`
		Rate          float64 `json:"admission_rate_per_s"`
	}
	ok := false
	for _, g := range s.r.gateURLs {
		pctx, cancel := part()
		err := s.r.call(pctx, http.MethodGet, g+"/v1/rooms/"+s.r.room, s.r.adminToken, nil, &room)
		cancel()
		if err == nil {
			ok = true
			break
		}
	}
	if ok {
		p.Waiting, p.Active, p.AdmittedTotal, p.AdmissionRate = room.Waiting, room.Active, room.AdmittedTotal, room.Rate
	} else {
		fail()
	}
	var ev struct {
		SeatsLeft float64 `json:"seats_left"`
		Sold      float64 `json:"sold"`
	}
	pctx, cancel := part()
	if s.r.call(pctx, http.MethodGet, s.r.checkoutURL+"/v1/events/"+s.r.event, s.r.adminToken, nil, &ev) == nil {
		p.SeatsLeft, p.Sold = ev.SeatsLeft, ev.Sold
	}
	cancel()
	var n int64
	pctx, cancel = part()
	if err := s.d.checkout.QueryRowContext(pctx, s.d.q(
		"SELECT COUNT(DISTINCT user_id) FROM checkout_holds WHERE state IN ('held', 'paying') AND expires_at > ?",
		"SELECT COUNT(DISTINCT user_id) FROM checkout_holds WHERE state IN ('held', 'paying') AND expires_at > $1"), s.d.at(time.Now())).Scan(&n); err == nil {
		p.CheckoutHeld = float64(n)
	} else {
		p.CheckoutHeld = -1 // not read
		fail()
	}
	cancel()
	pctx, cancel = part()
	if rows, err := s.d.pay.QueryContext(pctx, "SELECT status, COUNT(*) FROM payments GROUP BY status"); err == nil {
		clear(p.Payments) // a status no longer present is 0
		for rows.Next() {
			var st string
			var c int64
			if rows.Scan(&st, &c) == nil {
				p.Payments[st] = float64(c)
			}
		}
		if rows.Close() != nil || rows.Err() != nil {
			fail()
		}
	} else {
		fail()
	}
	cancel()
	pctx, cancel = part()
	if err := s.d.pay.QueryRowContext(pctx, "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err == nil {
		p.Outbox = float64(n)
	} else {
		fail()
	}
	cancel()
	lag := map[string]float64{}
	for _, u := range s.r.workerMetrics {
		pctx, cancel := part()
		got := scrapeLag(pctx, u)
		cancel()
		for part, v := range got {
			lag[part] = max(lag[part], v)
		}
	}
	if len(lag) > 0 {
		p.ConsumerLag = 0
		for _, v := range lag {
			p.ConsumerLag += v
		}
	}
	return p
}

// scrapeCounter reads one unlabelled metric from a worker's /metrics; 0
// when the worker does not answer (a dead one).
func scrapeCounter(ctx context.Context, u, name string) float64 {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := adminClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// scrapeLag reads a worker's per-partition lag plus held messages.
func scrapeLag(ctx context.Context, u string) map[string]float64 {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"stampede_worker_partition_lag{", "stampede_worker_partition_held{"} {
			if !strings.HasPrefix(line, name) {
				continue
			}
			i := strings.Index(line, "partition=\"")
			j := strings.LastIndex(line, " ")
			if i < 0 || j < 0 {
				continue
			}
			part := line[i+len("partition=\""):]
			part = part[:strings.IndexByte(part, '"')]
			v, err := strconv.ParseFloat(line[j+1:], 64)
			if err == nil {
				out[part] += v
			}
		}
	}
	return out
}

// cutSQLite holds an exclusive write lock on each SQLite file for d: no
// part can write (their calls run into --db-timeout and answer 503).
func cutSQLite(ctx context.Context, paths []string, d time.Duration) error {
	var conns []*sql.Conn
	var dbsOpen []*sql.DB
	defer func() {
		for _, c := range conns {
			_, _ = c.ExecContext(context.Background(), "ROLLBACK")
			c.Close()
		}
		for _, db := range dbsOpen {
			db.Close()
		}
	}()
	for _, p := range paths {
		db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(5000)")
		if err != nil {
			return err
		}
		dbsOpen = append(dbsOpen, db)
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
			c.Close()
			return fmt.Errorf("sale: locking %s: %w", p, err)
		}
		conns = append(conns, c)
	}
	sleep(ctx, d)
	return nil
}
