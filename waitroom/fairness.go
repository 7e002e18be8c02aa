package waitroom

import (
	"context"
	"crypto/sha1" //nolint:gosec // the log's chain and user hashes are SHA-1: Redis Lua has only redis.sha1hex
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Verifiable fairness. A room that opens at a set time (RoomConfig.OpensAt)
// draws its pre-queue in an order fixed by a secret seed: the store picks
// the seed when the opening is set, publishes its commitment (Commitment)
// at once and the seed itself only once the draw is done. Every admission
// is appended, in the same atomic step, to the room's admission log, a
// hash chain anyone holding it can check with VerifyLog (stampede room
// verify). The log's format, the draw and the checks are specified in
// docs/waitroom.md (Verifiable fairness); the functions below are that
// specification in Go.

// Fairness is what a room publishes so that its queue can be checked.
type Fairness struct {
	// Verifiable is false for a room whose queue is spread over shards:
	// it keeps no admission log and draws its pre-queue without a
	// committed seed.
	Verifiable bool
	// Commitment is Commitment(seed) of the seed of the room's opening,
	// published as soon as the opening is set; empty without an opening.
	Commitment string
	// Seed is the seed, in hex, once the pre-queue has been drawn (empty
	// before).
	Seed string
	// LogLength and LogHead are the admission log's number of entries
	// and the hash of its last entry (zeros when empty): whoever notes
	// them can later check that an exported log extends what they saw.
	LogLength int64
	LogHead   string
}

// FairnessStore is a Store that keeps the admission log and the seed of
// the pre-queue's draw.
type FairnessStore interface {
	// Fairness returns room's published commitment, seed and log head,
	// or ErrNoRoom.
	Fairness(ctx context.Context, room string) (Fairness, error)
	// AdmissionLog returns up to limit entries of room's admission log
	// from the entry numbered from (1 is the first), one line each.
	AdmissionLog(ctx context.Context, room string, from int64, limit int) ([]string, error)
}

// ZeroHash is the PREV of a log's first entry (and the head of an empty
// log).
const ZeroHash = "0000000000000000000000000000000000000000"

// SeedHexLen is the length of a seed in hex: 32 random bytes.
const SeedHexLen = 64

// Commitment returns the commitment to seed: the hex SHA-256 of the
// seed's hex text.
func Commitment(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(sum[:])
}

// UserHash returns how the admission log names user in room: the hex
// SHA-1 of "room:user".
func UserHash(room, user string) string { return sha1hex(room + ":" + user) }

// DrawKey returns the key the pre-queue is sorted by: the hex SHA-1 of
// "seed:userhash". The user with the smallest key takes the pre-queue's
// first place.
func DrawKey(seed, userHash string) string { return sha1hex(seed + ":" + userHash) }

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // see the import
	return hex.EncodeToString(sum[:])
}

// Fairness returns room's published fairness data; ok is false when the
// store keeps none.
func (s *Service) Fairness(ctx context.Context, room string) (f Fairness, ok bool, err error) {
	if err := ValidateRoom(room); err != nil {
		return Fairness{}, false, err
	}
	fs, ok := s.store.(FairnessStore)
	if !ok {
		return Fairness{}, false, nil
	}
	f, err = fs.Fairness(ctx, room)
	return f, err == nil, err
}

// MaxLogPage is the most log entries one AdmissionLog call returns.
const MaxLogPage = 5000

// AdmissionLog returns up to limit (at most MaxLogPage) entries of room's
// admission log from entry from (≥ 1).
func (s *Service) AdmissionLog(ctx context.Context, room string, from int64, limit int) ([]string, error) {
	if err := ValidateRoom(room); err != nil {
		return nil, err
	}
	if from < 1 {
		return nil, fieldError("from", "must be at least 1, got %d", from)
	}
	if limit < 1 || limit > MaxLogPage {
		return nil, fieldError("limit", "must be between 1 and %d, got %d", MaxLogPage, limit)
	}
	fs, ok := s.store.(FairnessStore)
	if !ok {
		return nil, &Error{Code: CodeNotFound, Message: "this store keeps no admission log"}
	}
	return fs.AdmissionLog(ctx, room, from, limit)
}

// LogEntry is one parsed line of an admission log.
type LogEntry struct {
	Seq  int64
	Kind string // "begin", "open" or "admit"
	At   time.Time
	// Room is a begin entry's room.
	Room string
	// An open entry's pre-queue size, first and last place, and seed
	// commitment ("-" when the opening had none).
	Drawn             int64
	First, Last       int64
	CommitmentOfDraw  string
	Pass              int64  // admit: the seq of the pass's first admission
	User              string // admit: UserHash of the admitted user
	Place             int64  // admit: the user's place in the queue
	Held, Cap         int64  // admit: slots held right after it, capacity then
	Returns           bool   // admit: users set aside for not polling could come back to their place
	Prev, Hash, Chain string // Chain: the line without " HASH", what Hash hashes
}

// ParseLogEntry parses one line of an admission log.
func ParseLogEntry(line string) (LogEntry, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return LogEntry{}, fmt.Errorf("too few fields (%d)", len(f))
	}
	var e LogEntry
	var err error
	num := func(s, what string) int64 {
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("%s: not an integer: %q", what, s)
		}
		return n
	}
	e.Seq = num(f[0], "seq")
	e.Kind = f[1]
	e.At = time.UnixMilli(num(f[2], "time")).UTC()
	want := map[string]int{"begin": 6, "open": 9, "admit": 11}[e.Kind]
	if want == 0 {
		return LogEntry{}, fmt.Errorf("unknown kind %q", e.Kind)
	}
	if len(f) != want {
		return LogEntry{}, fmt.Errorf("a %s entry has %d fields, got %d", e.Kind, want, len(f))
	}
	switch e.Kind {
	case "begin":
		e.Room = f[3]
	case "open":
		e.Drawn, e.First, e.Last, e.CommitmentOfDraw = num(f[3], "drawn"), num(f[4], "first"), num(f[5], "last"), f[6]
	case "admit":
		e.Pass, e.User, e.Place = num(f[3], "pass"), f[4], num(f[5], "place")
		e.Held, e.Cap, e.Returns = num(f[6], "held"), num(f[7], "cap"), f[8] == "1"
	}
	e.Prev, e.Hash = f[len(f)-2], f[len(f)-1]
	e.Chain = strings.Join(f[:len(f)-1], " ")
	return e, err
}

// VerifyOptions are what VerifyLog checks a log against.
type VerifyOptions struct {
	// Seed is the revealed seed (hex); required when the log has an
	// opening.
	Seed string
	// Commitment, when set, is the commitment the room published before
	// opening: the log's must be the same.
	Commitment string
	// User, when set, is a buyer's own id: the report says where their
	// admissions stand.
	User string
}

// VerifyReport is what VerifyLog found. The log passes when Problems is
// empty.
type VerifyReport struct {
	Room       string
	Entries    int64
	Admissions int64
	Passes     int64
	Openings   int64
	// Drawn counts the admissions of pre-queue users whose place was
	// checked against the seed's draw.
	Drawn int64
	// Returns counts admissions behind a later place admitted in an
	// earlier pass: users set aside for not polling who came back to
	// their place (allowed only while the room's abandon_after is on).
	Returns int64
	// MaxHeld is the most slots held after any admission; MaxHeldCap the
	// capacity then.
	MaxHeld, MaxHeldCap int64
	Head                string
	// UserLines describe the --user's admissions.
	UserLines []string
	Problems  []string
}

// OK reports whether the log passed every check.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// VerifyLog checks an admission log (its lines, in order): the chain is
// intact, the draw of every opening follows the seed, no admission came
// before a user with an earlier place beyond the tolerance (one admission
// pass; and users set aside for not polling who return, while the room
// lets them), and no admission took the room over its capacity.
func VerifyLog(lines []string, opt VerifyOptions) VerifyReport {
	var r VerifyReport
	problem := func(format string, args ...any) {
		if len(r.Problems) < 50 {
			r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
		}
	}
	seedCommit := ""
	if opt.Seed != "" {
		if len(opt.Seed) != SeedHexLen {
			problem("the seed must be %d hex characters, got %d", SeedHexLen, len(opt.Seed))
		}
		seedCommit = Commitment(strings.ToLower(opt.Seed))
		if opt.Commitment != "" && !strings.EqualFold(opt.Commitment, seedCommit) {
			problem("the seed does not match the published commitment %s", opt.Commitment)
		}
	}
	type drawn struct {
		seq, place int64
		key        string
		returns    bool
	}
	var (
		prev      = ZeroHash
		userHash  string
		open      *LogEntry // the latest opening
		openOK    bool      // its commitment matches the seed
		draws     []drawn
		hiBefore  int64 = -1 // the highest place admitted in an earlier pass
		hiPass    int64 = -1 // the highest place admitted in the current pass
		pass      int64
		lastHeld  int64
		anyOpened bool
	)
	checkDraws := func() {
		// Within one opening, the pre-queue's places follow the keys.
		slices.SortFunc(draws, func(a, b drawn) int { return int(a.place - b.place) })
		for i := 1; i < len(draws); i++ {
			if draws[i-1].key >= draws[i].key {
				if draws[i-1].returns || draws[i].returns {
					continue
				}
				problem("entries %d and %d: places %d < %d but their draw keys are in the other order: the pre-queue was not drawn with this seed",
					draws[i-1].seq, draws[i].seq, draws[i-1].place, draws[i].place)
			}
		}
		draws = draws[:0]
	}
	for i, line := range lines {
		e, err := ParseLogEntry(line)
		if err != nil {
			problem("line %d: %v", i+1, err)
			return r
		}
		r.Entries++
		if e.Seq != int64(i+1) {
			problem("line %d: seq is %d, want %d", i+1, e.Seq, i+1)
		}
		if e.Prev != prev {
			problem("entry %d: prev %s is not the previous entry's hash %s: the chain is broken", e.Seq, e.Prev, prev)
		}
		if h := sha1hex(e.Chain); h != e.Hash {
			problem("entry %d: hash %s, but the entry hashes to %s: it was changed", e.Seq, e.Hash, h)
		}
		prev = e.Hash
		switch e.Kind {
		case "begin":
			if e.Seq != 1 {
				problem("entry %d: a begin entry after the first", e.Seq)
			}
			r.Room = e.Room
			if opt.User != "" {
				userHash = UserHash(e.Room, opt.User)
			}
		case "open":
			checkDraws()
			r.Openings++
			anyOpened = true
			o := e
			open = &o
			openOK = seedCommit != "" && e.CommitmentOfDraw == seedCommit
			switch {
			case e.CommitmentOfDraw == "-":
				problem("entry %d: the room opened without a published commitment", e.Seq)
			case opt.Seed != "" && !openOK:
				problem("entry %d: the seed does not match the opening's commitment %s", e.Seq, e.CommitmentOfDraw)
			}
		case "admit":
			if r.Room == "" {
				problem("entry %d: an admission before the begin entry", e.Seq)
			}
			r.Admissions++
			if e.Pass != pass {
				if e.Pass != e.Seq {
					problem("entry %d: opens pass %d, but a pass is numbered by its first entry", e.Seq, e.Pass)
				}
				pass = e.Pass
				r.Passes++
				hiBefore = max(hiBefore, hiPass)
				hiPass = -1
			} else if e.Held != lastHeld+1 {
				problem("entry %d: holds %d slots after %d in the same pass", e.Seq, e.Held, lastHeld)
			}
			lastHeld = e.Held
			if e.Held > e.Cap {
				problem("entry %d: %d slots held, over the capacity %d", e.Seq, e.Held, e.Cap)
			}
			if e.Held > r.MaxHeld {
				r.MaxHeld, r.MaxHeldCap = e.Held, e.Cap
			}
			behind := e.Place < hiBefore
			if behind {
				if e.Returns {
					r.Returns++
				} else {
					problem("entry %d: place %d admitted after place %d in an earlier pass: it jumped the queue", e.Seq, e.Place, hiBefore)
				}
			}
			hiPass = max(hiPass, e.Place)
			var key string
			inDraw := open != nil && e.Place >= open.First && e.Place <= open.Last
			if inDraw && openOK {
				key = DrawKey(strings.ToLower(opt.Seed), e.User)
				draws = append(draws, drawn{seq: e.Seq, place: e.Place, key: key, returns: e.Returns})
				r.Drawn++
			}
			if userHash != "" && e.User == userHash {
				s := fmt.Sprintf("entry %d: admitted %s in the pass of entry %d, place %d, %d of %d slots held",
					e.Seq, e.At.Format(time.RFC3339Nano), e.Pass, e.Place, e.Held, e.Cap)
				if key != "" {
					s += fmt.Sprintf("; drawn in the pre-queue of entry %d with key %s", open.Seq, key)
				}
				if behind {
					s += "; behind a later place (back after being set aside)"
				}
				r.UserLines = append(r.UserLines, s)
			}
		}
	}
	checkDraws()
	r.Head = prev
	if anyOpened && opt.Seed == "" {
		problem("the log has an opening: give the seed the room revealed to check its draw")
	}
	if opt.User != "" && len(r.UserLines) == 0 {
		r.UserLines = append(r.UserLines, "no admission of this user in the log")
	}
	return r
}
