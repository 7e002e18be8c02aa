package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/redisstore"
	"github.com/stampede-lab/stampede/waitroom/storetest"
)

// The Redis Cluster tests run the store's scripts on a real cluster named
// by STAMPEDE_REDIS_CLUSTER_URL (redis-cluster://host1:port,host2:port,...),
// which .ci/run starts with .ci/redis-cluster (three masters on
// 127.0.0.1:7001-7003). A script touching keys of two slots fails there
// with CROSSSLOT, which standalone Redis and miniredis never report.

const envCluster = testenv.RedisClusterURL

func TestParseClusterURL(t *testing.T) {
	for _, tc := range []struct {
		url        string
		addrs      []string
		user, pass string
		bad        bool
	}{
		{url: "redis-cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}},
		{url: "redis-cluster://a:1/", addrs: []string{"a:1"}},
		{url: "redis-cluster://u:p@ss@a:1,b:2", addrs: []string{"a:1", "b:2"}, user: "u", pass: "p@ss"},
		{url: "redis-cluster://secret@[::1]:7001", addrs: []string{"[::1]:7001"}, pass: "secret"},
		{url: "redis-cluster://a:1,b", bad: true},
		{url: "redis-cluster://", bad: true},
		{url: "redis://a:1", bad: true},
	} {
		opts, err := redisstore.ParseClusterURL(tc.url)
		if tc.bad {
			if err == nil {
				t.Errorf("redisstore.ParseClusterURL(%q) = %+v, want an error", tc.url, opts)
			}
			continue
		}
		if err != nil {
			t.Errorf("redisstore.ParseClusterURL(%q): %v", tc.url, err)
			continue
		}
		if !slices.Equal(opts.Addrs, tc.addrs) || opts.Username != tc.user || opts.Password != tc.pass {
			t.Errorf("redisstore.ParseClusterURL(%q) = addrs %v, user %q, pass %q; want %v, %q, %q",
				tc.url, opts.Addrs, opts.Username, opts.Password, tc.addrs, tc.user, tc.pass)
		}
	}
}

// clusterClient connects to the cluster named by STAMPEDE_REDIS_CLUSTER_URL
// or skips the test. The client is closed by a cleanup registered before
// any room's, so it runs after the rooms are deleted (cleanups run LIFO).
func clusterClient(t *testing.T) (*redis.ClusterClient, *redis.ClusterOptions) {
	t.Helper()
	url := testenv.URL(t, envCluster)
	opts, err := redisstore.ParseClusterURL(url)
	if err != nil {
		t.Fatalf("%s: %v", envCluster, err)
	}
	client := redis.NewClusterClient(opts)
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatalf("%s=%s: cannot reach the cluster: %v", envCluster, url, err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		t.Fatalf("%s=%s: the cluster is not ok:\n%s", envCluster, url, info)
	}
	return client, opts
}

// TestConformanceCluster runs the suite on Redis Cluster.
func TestConformanceCluster(t *testing.T) {
	client, _ := clusterClient(t)
	for _, shards := range []int{0, testShards} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			storetest.Exercise(t, func(t *testing.T) waitroom.Store { return linStore(t, client) }, storetest.WithQueueShards(shards))
		})
	}
}

// TestLinearizableCluster checks join, admit and leave on Redis Cluster
// (its clock cannot be moved, and leases are far longer than the test).
func TestLinearizableCluster(t *testing.T) {
	client, _ := clusterClient(t)
	for _, shards := range []int{0, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			checkHistories(t, linStore(t, client), nil, time.Hour.Milliseconds(), func() int64 { return time.Now().UnixMilli() }, shards)
		})
	}
}

// allKeys lists every key of a room, KeysFor's fields in order.
func allKeys(k redisstore.Keys) []string {
	return []string{k.Config, k.Seq, k.Queue, k.Active, k.State, k.SeqOf, k.Stats,
		k.JoinedAt, k.Seen, k.Unarrived, k.Bucket, k.Done}
}

// TestClusterRoomKeysShareASlot: the cluster itself puts every key of a
// room in one slot, and a room that has been used has all its keys on the
// one master that serves that slot and on no other.
func TestClusterRoomKeysShareASlot(t *testing.T) {
	client, opts := clusterClient(t)
	ctx := context.Background()
	//lint:ignore SA1019 CLUSTER SLOTS answers on Redis 6 as on 7; CLUSTER SHARDS (its successor) needs 7.
	slots, err := client.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(slot int64) string {
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				return s.Nodes[0].Addr
			}
		}
		t.Fatalf("no master serves slot %d (CLUSTER SLOTS: %+v)", slot, slots)
		return ""
	}
	var masters []string
	for _, s := range slots {
		if len(s.Nodes) > 0 && !slices.Contains(masters, s.Nodes[0].Addr) {
			masters = append(masters, s.Nodes[0].Addr)
		}
	}
	// node is a plain client on one node: it runs commands there and would
	// get MOVED for a key of a slot that node does not serve.
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: opts.Username, Password: opts.Password})
		t.Cleanup(func() { c.Close() })
		return c
	}

	store := redisstore.New(client)
	unique := fmt.Sprintf("slot-%d", time.Now().UnixNano())
	// Names spread over the slot space: on the cluster .ci/redis-cluster
	// makes, each of its three masters serves some of them.
	rooms := []string{"a", "concert", "concert-2026", "tickets_eu", "Z", "lobby", "queue-1", "room-with-a-rather-long-name-0123456789", unique}
	onMaster := map[string][]string{}
	for _, room := range rooms {
		keys := allKeys(redisstore.KeysFor(room))
		slot, err := client.ClusterKeySlot(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys[1:] {
			if s, err := client.ClusterKeySlot(ctx, key).Result(); err != nil || s != slot {
				t.Errorf("room %q: CLUSTER KEYSLOT %s = %d, %v; %s is in slot %d", room, key, s, err, keys[0], slot)
			}
		}
		master := masterOf(slot)
		onMaster[master] = append(onMaster[master], room)
		t.Logf("room %q: slot %d on %s", room, slot, master)
	}
	t.Logf("%d masters; rooms by master: %v", len(masters), onMaster)
	if len(onMaster) < min(2, len(masters)) {
		t.Errorf("every room is on one master of %d (%v): the check above proves little", len(masters), onMaster)
	}

	// Use one room so that every one of its keys exists, then look for
	// them node by node.
	cfg := waitroom.DefaultRoomConfig()
	cfg.Capacity, cfg.Arrival, cfg.MaxAdmissionsPerMinute = 1, 10*time.Second, 600
	if err := store.Configure(ctx, unique, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DeleteRoom(context.Background(), unique) })
	for _, u := range []string{"u1", "u2"} {
		if _, err := store.Join(ctx, unique, u); err != nil {
			t.Fatalf("Join(%s): %v", u, err)
		}
	}
	if res, err := store.Admit(ctx, unique); err != nil || len(res.Admitted) != 1 {
		t.Fatalf("Admit(atomic) = %+v, %v; want one admitted", res, err)
	}
	if _, err := store.Join(ctx, unique, "u3"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Leave(ctx, unique, "u3"); err != nil {
		t.Fatal(err)
	}
	keys := allKeys(redisstore.KeysFor(unique))
	slot, err := client.ClusterKeySlot(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := masterOf(slot)
	n, err := node(owner).Exists(ctx, keys...).Result()
	if err != nil || n != int64(len(keys)) {
		t.Fatalf("EXISTS %v on %s, the master of slot %d = %d, %v; want all %d there", keys, owner, slot, n, err, len(keys))
	}
	for _, addr := range masters {
		count, err := node(addr).ClusterCountKeysInSlot(ctx, int(slot)).Result()
		if err != nil {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT %d on %s: %v", slot, addr, err)
		}
		switch {
		case addr == owner && count < int64(len(keys)):
			t.Errorf("CLUSTER COUNTKEYSINSLOT %d on its master %s = %d, want at least %d", slot, addr, count, len(keys))
		case addr != owner && count != 0:
			t.Errorf("CLUSTER COUNTKEYSINSLOT %d on %s, which does not serve it, = %d, want 0", slot, addr, count)
		}
	}

	// DeleteRoom's one multi-key DEL removes them all.
	if err := store.DeleteRoom(ctx, unique); err != nil {
		t.Fatalf("DeleteRoom: %v", err)
	}
	if n, err := node(owner).Exists(ctx, keys...).Result(); err != nil || n != 0 {
		t.Fatalf("after DeleteRoom, EXISTS on %s = %d, %v; want 0", owner, n, err)
	}
}
