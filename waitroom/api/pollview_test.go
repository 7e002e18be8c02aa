package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// userReads counts the store commands that name a user (ticket, join and
// leave scripts, and the instance's presence flushes), by user.
type userReads struct {
	// noFlushes leaves the presence flushes out. They name only users
	// (the touch script's arguments are the users it marks present) and
	// run on their own schedule, possibly while a poll answered from the
	// view is in flight.
	noFlushes bool
	mu        sync.Mutex
	n         map[string]int
}

func (u *userReads) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 || !strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && !strings.EqualFold(fmt.Sprint(args[0]), "eval") {
		return
	}
	numKeys, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+numKeys {
		return
	}
	var users []string
	others := 0
	for _, a := range args[3+numKeys:] {
		if s, ok := a.(string); ok && strings.HasPrefix(s, "pv-") {
			users = append(users, s)
		} else {
			others++
		}
	}
	if others == 0 && u.noFlushes {
		return // a presence flush
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range users {
		u.n[s]++
	}
}

func (u *userReads) of(user string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n[user]
}

func (u *userReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (u *userReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		u.count(cmd)
		return next(ctx, cmd)
	}
}
func (u *userReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			u.count(c)
		}
		return next(ctx, cmds)
	}
}

// pollBuyer is a buyer of the test: their newest ticket token and the
// positions shown to them.
type pollBuyer struct {
	user, token string
	last        int64 // the last position shown; 0 before the first poll
}

// TestPollsFromViewWithinBound: while the room admits and buyers ahead
// leave, buyers far back polling with their newest token are answered
// from the instance's view without a store call, and every position shown
// is at least the true one (read from the store right after), above it by
// at most waitroom.PositionSlack plus what changed since the view the poll
// could have used, and never higher than the buyer's previous one.
func TestPollsFromViewWithinBound(t *testing.T) {
	b := miniBackend(t)
	// A flush naming a buyer during its poll is not a read of its ticket.
	reads := &userReads{noFlushes: true, n: map[string]int{}}
	b.client.AddHook(reads)
	e := newEnvWith(t, b, false, func(c *api.Config) { c.ViewRefresh = 50 * time.Millisecond })
	svc := e.srv.Service()
	// Five slots, leases of one second: the room admits about five a
	// second all along.
	room := e.newRoom(t, `{"capacity":5,"lease_seconds":1,"admit_interval_ms":100}`)
	waitFor(t, "the room's view", func() bool { _, ok := svc.View(room); return ok })
	const n = 200
	buyers := make([]*pollBuyer, n)
	for i := range buyers {
		u := fmt.Sprintf("pv-%03d", i)
		buyers[i] = &pollBuyer{user: u, token: join(t, e, room, u).str("ticket_token")}
	}
	ctx := context.Background()
	truth := func(user string) (waitroom.Ticket, waitroom.RoomView) {
		t.Helper()
		tk, err := e.store.Ticket(ctx, room, user)
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.store.View(ctx, room)
		if err != nil {
			t.Fatal(err)
		}
		return tk, v
	}
	left := map[string]bool{}
	var polls, local, worst int64
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		// Three buyers of the front half leave.
		for range 3 {
			bb := buyers[rng.IntN(n/2)]
			if !left[bb.user] {
				left[bb.user] = true
				e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, bb.user), auth: "Bearer " + bb.token})
			}
		}
		// Ten buyers of the back half poll.
		for range 10 {
			bb := buyers[n/2+rng.IntN(n/2)]
			before, fresh := svc.View(room)
			readsBefore := reads.of(bb.user)
			a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, bb.user), auth: "Bearer " + bb.token})
			fromView := reads.of(bb.user) == readsBefore
			tk, now := truth(bb.user)
			if a.str("state") != "waiting" || tk.State != waitroom.StateWaiting {
				t.Fatalf("round %d: %s = %s (store: %+v), want waiting far back", round, bb.user, a.raw, tk)
			}
			ahead := int64(a.json["ahead"].(float64))
			if tok := a.str("ticket_token"); tok != "" {
				bb.token = tok
			}
			polls++
			if fromView {
				local++
				if !fresh {
					t.Fatalf("round %d: %s answered without the store while the view was not fresh", round, bb.user)
				}
				bound := waitroom.PositionSlack(ahead) + (now.AdmittedTotal - before.AdmittedTotal) + (now.DepartedTotal - before.DepartedTotal)
				if ahead < tk.Position || ahead-tk.Position > bound {
					t.Fatalf("round %d: %s shown %d ahead from the view, the store says %d: outside [true, true+%d]", round, bb.user, ahead, tk.Position, bound)
				}
				worst = max(worst, ahead-tk.Position)
			} else if ahead < tk.Position-int64(now.AdmittedTotal-before.AdmittedTotal) {
				t.Fatalf("round %d: %s read from the store shows %d ahead, the store says %d right after", round, bb.user, ahead, tk.Position)
			}
			if bb.last > 0 && ahead+1 > bb.last {
				t.Fatalf("round %d: %s's position went up from %d to %d", round, bb.user, bb.last, ahead+1)
			}
			bb.last = ahead + 1
		}
		time.Sleep(60 * time.Millisecond)
	}
	t.Logf("%d polls, %d answered from the view; the largest excess over the true rank was %d", polls, local, worst)
	if local < polls/2 {
		t.Errorf("only %d of %d polls far back were answered from the view", local, polls)
	}
	// The metric counts the same polls by answer.
	m := e.must(t, http.StatusOK, req{method: "GET", path: "/metrics", auth: "Bearer " + adminToken})
	var fromView, fromStore int64
	for _, line := range strings.Split(string(m.raw), "\n") {
		if !strings.HasPrefix(line, "stampede_waitroom_polls_total{") || !strings.Contains(line, `room="`+room+`"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		if strings.Contains(line, `answer="view"`) {
			fromView += int64(v)
		} else {
			fromStore += int64(v)
		}
	}
	if fromView != local || fromView+fromStore != polls {
		t.Errorf("stampede_waitroom_polls_total: %d from the view and %d from the store, want %d and %d", fromView, fromStore, local, polls-local)
	}
}

// TestPresenceFromViewKeepsPlaces: buyers answered from the view keep
// their places through several abandon_after windows, because the
// instance writes their presence in batches; a buyer who stops polling is
// set aside as before; and a buyer who left is told so once a flush has
// found them gone.
func TestPresenceFromViewKeepsPlaces(t *testing.T) {
	b := miniBackend(t)
	reads := &userReads{n: map[string]int{}}
	b.client.AddHook(reads)
	e := newEnvWith(t, b, false, func(c *api.Config) {
		c.ViewRefresh, c.PresenceFlush = 50*time.Millisecond, 200*time.Millisecond
	})
	svc := e.srv.Service()
	room := e.newRoom(t, `{"capacity":1,"lease_seconds":3600,"admit_interval_ms":100,"abandon_after_seconds":1}`)
	waitFor(t, "the room's view", func() bool { _, ok := svc.View(room); return ok })
	var buyers []*pollBuyer
	for i := range 80 {
		u := fmt.Sprintf("pv-%03d", i)
		buyers = append(buyers, &pollBuyer{user: u, token: join(t, e, room, u).str("ticket_token")})
	}
	// Everyone but pv-010 polls every 250 ms for 3 s: three abandon
	// windows.
	quiet := buyers[10]
	readsBefore := map[string]int{}
	for _, bb := range buyers {
		readsBefore[bb.user] = reads.of(bb.user)
	}
	for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(250 * time.Millisecond) {
		for _, bb := range buyers {
			if bb == quiet {
				continue
			}
			a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, bb.user), auth: "Bearer " + bb.token})
			if tok := a.str("ticket_token"); tok != "" {
				bb.token = tok
			}
		}
	}
	ctx := context.Background()
	var local int
	for _, bb := range buyers[60:] {
		// Far back: read the store only for the presence flushes (one
		// script per 200 ms for everyone) and their first polls.
		if reads.of(bb.user)-readsBefore[bb.user] <= 16 {
			local++
		}
	}
	if local < 15 {
		t.Errorf("only %d of the last 20 buyers were answered mostly from the view", local)
	}
	for _, bb := range buyers {
		tk, err := e.store.Ticket(ctx, room, bb.user)
		if err != nil {
			t.Fatal(err)
		}
		if bb == quiet {
			if tk.State != waitroom.StateAbandoned {
				t.Errorf("%s, who never polled, = %+v; want abandoned", bb.user, tk)
			}
			continue
		}
		if tk.State != waitroom.StateWaiting && tk.State != waitroom.StateAdmitted {
			t.Fatalf("%s polled all along and is %s in the store: their presence was not written", bb.user, tk.State)
		}
	}
	// A buyer far back leaves: once a flush has found them gone, their
	// poll reads the store and says so.
	gone := buyers[70]
	e.must(t, http.StatusOK, req{method: "DELETE", path: ticketPath(room, gone.user), auth: "Bearer " + gone.token})
	waitFor(t, "the poll of a buyer who left to say so", func() bool {
		a := e.must(t, http.StatusOK, req{method: "GET", path: ticketPath(room, gone.user), auth: "Bearer " + gone.token})
		time.Sleep(50 * time.Millisecond)
		return a.str("state") == "left"
	})
}

// TestPollsFromViewAcrossInstances: buyers whose polls go round three
// instances, each poll at least three view refreshes after the previous
// one and with the newest token, never see their position go up, while
// the room admits and some of them leave.
func TestPollsFromViewAcrossInstances(t *testing.T) {
	b := miniBackend(t)
	store := redisstore.New(b.client)
	var urls []string
	for i := range 3 {
		_, ts := faultStartWith(t, store, fmt.Sprintf("pv-across-%d", i), nil, func(c *api.Config) { c.ViewRefresh = 50 * time.Millisecond })
		urls = append(urls, ts.URL)
	}
	hc := faultHTTPClient(t)
	send := func(method, url, body, auth string) (answer, error) {
		r, _ := http.NewRequest(method, url, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		res, err := hc.Do(r)
		if err != nil {
			return answer{}, err
		}
		defer res.Body.Close()
		a := answer{status: res.StatusCode, header: res.Header}
		a.raw, _ = io.ReadAll(res.Body)
		json.Unmarshal(a.raw, &a.json)
		return a, nil
	}
	room := "pv-across-" + faultRand()
	t.Cleanup(func() { store.DeleteRoom(context.Background(), room) })
	if a, err := send("PUT", urls[0]+"/v1/rooms/"+room, roomBody(t, `{"capacity":5,"lease_seconds":1,"admit_interval_ms":100}`), "Bearer "+faultAdminToken); err != nil || a.status != http.StatusOK {
		t.Fatalf("configure: %v %s", err, a.raw)
	}
	var wg sync.WaitGroup
	var fromView atomic.Int64
	for i := range 120 {
		wg.Go(func() {
			user := fmt.Sprintf("pv-%03d", i)
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			var a answer
			var err error
			for try := 0; ; try++ {
				// A starved machine (the race detector) may answer 503
				// when the store is slower than its timeout: try again.
				a, err = send("POST", urls[i%3]+"/v1/rooms/"+room+"/tickets", `{"user_id":"`+user+`"}`, "")
				if err != nil || a.status != http.StatusServiceUnavailable || try == 5 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil || a.status != http.StatusCreated {
				t.Errorf("%s: join: %v %s", user, err, a.raw)
				return
			}
			token, last := a.str("ticket_token"), int64(1<<62)
			for poll := 1; poll <= 14; poll++ {
				time.Sleep(time.Duration(160+rand.IntN(80)) * time.Millisecond)
				if i%10 == 0 && poll == 7 {
					send("DELETE", urls[(i+poll)%3]+ticketPath(room, user), "", "Bearer "+token)
					return
				}
				a, err := send("GET", urls[(i+poll)%3]+ticketPath(room, user), "", "Bearer "+token)
				if err == nil && a.status == http.StatusServiceUnavailable {
					continue // the store slower than its timeout on a starved machine: no answer
				}
				if err != nil || a.status != http.StatusOK {
					t.Errorf("%s: poll: %v %s", user, err, a.raw)
					return
				}
				if a.str("state") != "waiting" {
					return
				}
				if tok := a.str("ticket_token"); tok != "" {
					token = tok
				} else {
					fromView.Add(1)
				}
				pos := int64(a.json["position"].(float64))
				if pos > last {
					t.Errorf("%s: position went from %d to %d at poll %d (via instance %d)", user, last, pos, poll, (i+poll)%3)
				}
				last = pos
			}
		})
	}
	wg.Wait()
	if fromView.Load() == 0 {
		t.Error("no poll was answered from a view")
	}
	t.Logf("%d polls answered from a view", fromView.Load())
}
