package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
)

// The linearizability check: several clients join, admit, leave and (on
// the embedded server, whose clock the test controls) move time past
// leases, all at once against one room; porcupine then checks that the
// recorded history is explained by some sequential order of the same
// operations on a simple model of the room.

// linCapacity is the room's capacity in every history.
const linCapacity = 2

type linInput struct {
	op      string // join, admit, leave, advance
	user    string
	advance int64 // ms, for advance
}

type linOutput struct {
	state    string
	position int64
	admitted []string
	expired  int
	notFound bool
}

// roomModel is the sequential specification. It is never mutated: Step
// returns a changed copy.
type roomModel struct {
	now    int64
	queue  []string
	active map[string]int64 // user → lease expiry (ms)
	state  map[string]string
}

func (m roomModel) clone() roomModel {
	return roomModel{now: m.now, queue: slices.Clone(m.queue), active: cloneMap(m.active), state: cloneMap(m.state)}
}

func cloneMap[V any](in map[string]V) map[string]V {
	out := make(map[string]V, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// linModel is the room's specification. With relaxed (sharded rooms), an
// admission pass may admit fewer users than the free places: any prefix
// of the users the model would admit, in order (a user who left while the
// pass ran, or a pass running at once, makes it stop early; the next pass
// admits the rest), and a join's position is not checked: a sharded room
// counts the users ahead in the other shards in a read of its own, after
// the join (the conformance suite checks positions where nothing runs at
// once). Capacity, order and every other answer stay exact.
func linModel(start, leaseMS int64, relaxed bool) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} {
			return roomModel{now: start, active: map[string]int64{}, state: map[string]string{}}
		},
		Step: func(st, in, out interface{}) (bool, interface{}) {
			m := st.(roomModel).clone()
			i, o := in.(linInput), out.(linOutput)
			// Join and leave first expire the user's own run-out lease,
			// as the scripts do.
			if i.op == "join" || i.op == "leave" {
				if exp, ok := m.active[i.user]; ok && exp <= m.now {
					delete(m.active, i.user)
					m.state[i.user] = "expired"
				}
			}
			switch i.op {
			case "advance":
				m.now += i.advance
				return true, m
			case "join":
				switch m.state[i.user] {
				case "waiting":
					return o.state == "waiting" && (relaxed || o.position == int64(slices.Index(m.queue, i.user))), m
				case "admitted":
					return o.state == "admitted", m
				}
				m.queue = append(m.queue, i.user)
				m.state[i.user] = "waiting"
				return o.state == "waiting" && (relaxed || o.position == int64(len(m.queue)-1)), m
			case "leave":
				switch s, ok := m.state[i.user]; {
				case !ok:
					return o.notFound, m
				case s == "waiting":
					m.queue = slices.DeleteFunc(m.queue, func(u string) bool { return u == i.user })
					m.state[i.user] = "left"
				case s == "admitted":
					delete(m.active, i.user)
					m.state[i.user] = "released"
				}
				return o.state == m.state[i.user], m
			case "admit":
				expired := 0
				for u, exp := range m.active {
					if exp <= m.now {
						delete(m.active, u)
						m.state[u] = "expired"
						expired++
					}
				}
				var admitted []string
				for len(m.active) < linCapacity && len(m.queue) > 0 && (!relaxed || len(admitted) < len(o.admitted)) {
					u := m.queue[0]
					m.queue = m.queue[1:]
					m.active[u] = m.now + leaseMS
					m.state[u] = "admitted"
					admitted = append(admitted, u)
				}
				return o.expired == expired && slices.Equal(o.admitted, admitted), m
			}
			return false, m
		},
		Equal: func(a, b interface{}) bool { return reflect.DeepEqual(a, b) },
		DescribeOperation: func(in, out interface{}) string {
			return fmt.Sprintf("%+v -> %+v", in, out)
		},
	}
}

// runHistory lets clients loose on one room and records what they saw.
func runHistory(t *testing.T, store *redisstore.Store, advance func(int64), leaseMS int64, seed uint64, shards int) []porcupine.Operation {
	t.Helper()
	ctx := context.Background()
	room := fmt.Sprintf("lin-%d-%d", seed, time.Now().UnixNano())
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Lease, cfg.QueueShards = linCapacity, time.Duration(leaseMS)*time.Millisecond, shards
	// The model knows leases, not abandonment or arrival: its clients
	// stand still while the clock is advanced.
	cfg.AbandonAfter, cfg.Arrival = 0, 0
	if err := store.Configure(ctx, room, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DeleteRoom(context.Background(), room) })
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
		wg  sync.WaitGroup
	)
	const clients, perClient = 3, 12
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		wg.Go(func() {
			for range perClient {
				in := linInput{user: fmt.Sprintf("u%d", rng.IntN(6))}
				switch r := rng.IntN(10); {
				case r < 4:
					in.op = "join"
				case r < 7:
					in.op = "admit"
				case r < 9:
					in.op = "leave"
				default:
					if advance == nil || c != 0 { // one client owns the clock, so it only moves forward
						in.op = "admit"
					} else {
						in.op, in.advance = "advance", 600
					}
				}
				call := time.Now().UnixNano()
				out, err := apply(ctx, store, room, in, advance)
				ret := time.Now().UnixNano()
				if err != nil {
					t.Errorf("%+v: %v", in, err)
					return
				}
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ops
}

func apply(ctx context.Context, s *redisstore.Store, room string, in linInput, advance func(int64)) (linOutput, error) {
	switch in.op {
	case "advance":
		advance(in.advance)
		return linOutput{}, nil
	case "join":
		tk, err := s.Join(ctx, room, in.user)
		if err != nil {
			return linOutput{}, err
		}
		pos := tk.Position
		if tk.State != waitroom.StateWaiting {
			pos = 0
		}
		return linOutput{state: string(tk.State), position: pos}, nil
	case "leave":
		tk, err := s.Leave(ctx, room, in.user)
		if waitroom.ErrorCode(err) == waitroom.CodeNotFound {
			return linOutput{notFound: true}, nil
		}
		if err != nil {
			return linOutput{}, err
		}
		return linOutput{state: string(tk.State)}, nil
	default:
		res, err := s.Admit(ctx, room)
		if err != nil {
			return linOutput{}, err
		}
		return linOutput{admitted: res.Admitted, expired: res.Expired}, nil
	}
}

func checkHistories(t *testing.T, store *redisstore.Store, advance func(int64), leaseMS int64, now func() int64, shards int) {
	for seed := range uint64(25) {
		start := now()
		ops := runHistory(t, store, advance, leaseMS, seed, shards)
		model := linModel(start, leaseMS, shards > 1)
		res, info := porcupine.CheckOperationsVerbose(model, ops, 10*time.Second)
		if res != porcupine.Ok {
			path := fmt.Sprintf("%s/lin-%d.html", t.TempDir(), seed)
			if f, err := os.Create(path); err == nil {
				_ = porcupine.Visualize(model, info, f)
				f.Close()
			}
			t.Fatalf("history %d is not linearizable against the room model (%v); visualization: %s", seed, res, path)
		}
	}
}

func TestLinearizableEmbedded(t *testing.T) {
	m := miniredis.RunT(t)
	var (
		mu  sync.Mutex
		now = time.Now().Truncate(time.Millisecond)
	)
	m.SetTime(now)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() }) // after the rooms are deleted
	advance := func(ms int64) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Duration(ms) * time.Millisecond)
		m.SetTime(now)
	}
	for _, shards := range []int{0, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			checkHistories(t, linStore(t, client), advance, 1000, func() int64 {
				mu.Lock()
				defer mu.Unlock()
				return now.UnixMilli()
			}, shards)
		})
	}
}

// linStore is the Store of the checks: positions in sharded rooms counted
// exactly.
func linStore(t *testing.T, client redis.UniversalClient) *redisstore.Store {
	cfg := redisstore.DefaultConfig()
	cfg.PositionCache = 0
	s, err := redisstore.NewWithConfig(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLinearizableRealRedis checks join, admit and leave on a real server
// (its clock cannot be moved, and leases are far longer than the test).
func TestLinearizableRealRedis(t *testing.T) {
	url := testenv.URL(t, testenv.RedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() }) // after the rooms are deleted
	for _, shards := range []int{0, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			checkHistories(t, linStore(t, client), nil, time.Hour.Milliseconds(), func() int64 { return time.Now().UnixMilli() }, shards)
		})
	}
}
