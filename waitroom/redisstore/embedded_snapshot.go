package redisstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// StartEmbeddedAt starts an embedded server on addr (such as
// 127.0.0.1:6390), loading the snapshot at snapshot first when that file
// exists (an empty snapshot path loads nothing). A fixed address and a
// snapshot let clients reconnect to a restarted server that kept its
// data, as a Redis with persistence does (the sale lab's Redis restart).
func StartEmbeddedAt(addr, snapshot string) (*Embedded, error) {
	m := miniredis.NewMiniRedis()
	if snapshot != "" {
		if err := load(m, snapshot); err != nil {
			return nil, err
		}
	}
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("redisstore: start embedded Redis on %s: %w", addr, err)
	}
	e := &Embedded{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go e.clock()
	return e, nil
}

// snapshotKey is one key of a snapshot: its type, value and time to live.
type snapshotKey struct {
	Type   string             `json:"type"`
	String string             `json:"string,omitempty"`
	Hash   map[string]string  `json:"hash,omitempty"`
	ZSet   map[string]float64 `json:"zset,omitempty"`
	Set    []string           `json:"set,omitempty"`
	List   []string           `json:"list,omitempty"`
	TTLms  int64              `json:"ttl_ms,omitempty"`
}

// Save writes every key of database 0 (strings, hashes, sorted sets,
// sets and lists, with their TTLs) to path, atomically (a temporary file
// renamed). Call it after the server stopped taking writes (Close the
// listener first) for a consistent snapshot.
func (e *Embedded) Save(path string) error {
	snap := map[string]snapshotKey{}
	for _, k := range e.m.Keys() {
		sk := snapshotKey{Type: e.m.Type(k), TTLms: e.m.TTL(k).Milliseconds()}
		var err error
		switch sk.Type {
		case "string":
			sk.String, err = e.m.Get(k)
		case "hash":
			var fields []string
			if fields, err = e.m.HKeys(k); err == nil {
				sk.Hash = make(map[string]string, len(fields))
				for _, f := range fields {
					sk.Hash[f] = e.m.HGet(k, f)
				}
			}
		case "zset":
			sk.ZSet, err = e.m.SortedSet(k)
		case "set":
			sk.Set, err = e.m.Members(k)
		case "list":
			sk.List, err = e.m.List(k)
		default:
			err = fmt.Errorf("type %q cannot be saved", sk.Type)
		}
		if err != nil {
			return fmt.Errorf("redisstore: snapshot key %q: %w", k, err)
		}
		snap[k] = sk
	}
	data, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("redisstore: snapshot: %w", err)
	}
	return os.Rename(tmp, path)
}

// load fills m from the snapshot at path; a missing file loads nothing.
func load(m *miniredis.Miniredis, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisstore: snapshot: %w", err)
	}
	var snap map[string]snapshotKey
	if err := json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("redisstore: snapshot %s: %w", path, err)
	}
	for k, sk := range snap {
		switch sk.Type {
		case "string":
			err = m.Set(k, sk.String)
		case "hash":
			for f, v := range sk.Hash {
				m.HSet(k, f, v)
			}
		case "zset":
			for member, score := range sk.ZSet {
				if _, err = m.ZAdd(k, score, member); err != nil {
					break
				}
			}
		case "set":
			_, err = m.SAdd(k, sk.Set...)
		case "list":
			_, err = m.Push(k, sk.List...)
		}
		if err != nil {
			return fmt.Errorf("redisstore: snapshot key %q: %w", k, err)
		}
		if sk.TTLms > 0 {
			m.SetTTL(k, time.Duration(sk.TTLms)*time.Millisecond)
		}
	}
	return nil
}

// CloseListener stops accepting commands but keeps the data, so that Save
// then sees no more writes.
func (e *Embedded) CloseListener() { e.m.Close() }
