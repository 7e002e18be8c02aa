// Package waitroom is a waiting room in front of a checkout with a fixed
// capacity: users join a FIFO queue, an admitter lets them into the room
// while it has free slots, and every admission holds a lease that ends when
// the user releases the slot or the lease expires.
//
// The invariant: at every instant the room holds at most Capacity admitted
// users, however many service instances admit at once. Every user who joined
// ends admitted, released, expired or left, and a waiting user's position
// never increases.
//
// The domain lives here; the Redis implementation of Store is in
// waitroom/redisstore. Four admission modes exist so that the lab can
// compare them (see Mode); production uses ModeAtomic.
package waitroom

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Mode is how an admission pass moves users from the queue into the room.
type Mode string

// The admission modes. Only ModeAtomic is safe with several instances; the
// others exist to be measured.
const (
	// ModeNaive counts the room, pops the free number of users and adds
	// them, in separate round trips. Two instances admitting at once can
	// both see the same free slots: the room overfills.
	ModeNaive Mode = "naive"
	// ModeLeader runs ModeNaive only on the instance that wins a per-tick
	// SET NX PX election.
	ModeLeader Mode = "leader"
	// ModeOptimistic pops one user, adds them to the room, counts, and
	// undoes the admission when the count is over capacity. The room can be
	// over capacity for the moment between the add and the undo.
	ModeOptimistic Mode = "optimistic"
	// ModeAtomic reclaims expired leases, counts and admits in one server
	// side script: never observable over capacity, FIFO kept.
	ModeAtomic Mode = "atomic"
)

// Modes lists every mode in the order the lab reports them.
func Modes() []Mode { return []Mode{ModeNaive, ModeLeader, ModeOptimistic, ModeAtomic} }

// ParseMode turns a name into a Mode.
func ParseMode(name string) (Mode, error) {
	for _, m := range Modes() {
		if string(m) == name {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown mode %q (want naive, leader, optimistic or atomic)", name)
}

// State is where a user stands in a room.
type State string

// The states of a ticket.
const (
	StateWaiting  State = "waiting"
	StateAdmitted State = "admitted"
	StateReleased State = "released" // left the room on their own
	StateExpired  State = "expired"  // the lease ran out
	StateLeft     State = "left"     // left the queue before admission
)

// ValidateRoom checks a room name: 1 to 64 letters, digits, '-' or '_'.
// Room names become part of storage keys, so nothing else is allowed.
func ValidateRoom(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fieldError("room", "must be 1 to 64 characters, got %d", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fieldError("room", "may contain only letters, digits, '-' and '_', got %q", r)
		}
	}
	return nil
}

// MaxUserLen is the longest accepted user id, in bytes.
const MaxUserLen = 128

// ValidateUser checks a user id: 1 to MaxUserLen bytes of printable UTF-8.
func ValidateUser(id string) error {
	if len(id) == 0 || len(id) > MaxUserLen {
		return fieldError("user_id", "must be 1 to %d bytes, got %d", MaxUserLen, len(id))
	}
	if !utf8.ValidString(id) {
		return fieldError("user_id", "must be valid UTF-8")
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return fieldError("user_id", "must not contain control or invisible characters")
		}
	}
	return nil
}

// RoomConfig configures one room.
type RoomConfig struct {
	// Capacity is the most users the room holds at once.
	Capacity int `json:"capacity"`
	// Lease is how long an admission lasts unless released.
	Lease time.Duration `json:"-"`
	// AdmitInterval is the admitter's tick.
	AdmitInterval time.Duration `json:"-"`
	// Mode is the admission mode.
	Mode Mode `json:"mode"`
	// PoWDifficulty is the leading zero bits of the proof of work a join
	// must carry (see GET /v1/rooms/{room}/challenge); 0 turns it off.
	PoWDifficulty int `json:"pow_difficulty"`
	// Template brands the room's waiting page; the zero value is the
	// plain page.
	Template RoomTemplate `json:"template"`
}

// DefaultRoomConfig is a room of 100 with 5-minute leases, admitting every
// 200 ms in atomic mode.
func DefaultRoomConfig() RoomConfig {
	return RoomConfig{Capacity: 100, Lease: 5 * time.Minute, AdmitInterval: 200 * time.Millisecond, Mode: ModeAtomic}
}

// Validate reports the first unusable field by its JSON name.
func (c RoomConfig) Validate() error {
	switch {
	case c.Capacity < 1 || c.Capacity > 1_000_000:
		return fieldError("capacity", "must be between 1 and 1000000, got %d", c.Capacity)
	case c.Lease < time.Second || c.Lease > 24*time.Hour:
		return fieldError("lease_seconds", "must be between 1 and 86400, got %v", c.Lease.Seconds())
	case c.AdmitInterval < 10*time.Millisecond || c.AdmitInterval > time.Minute:
		return fieldError("admit_interval_ms", "must be between 10 and 60000, got %d", c.AdmitInterval.Milliseconds())
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return fieldError("mode", "%v", err)
	}
	if c.PoWDifficulty < 0 || c.PoWDifficulty > MaxPoWDifficulty {
		return fieldError("pow_difficulty", "must be between 0 (off) and %d bits, got %d", MaxPoWDifficulty, c.PoWDifficulty)
	}
	return c.Template.Validate()
}

// Ticket is one user's place in one room.
type Ticket struct {
	Room  string
	User  string
	State State
	// Position counts the users ahead in the queue (0 is next); meaningful
	// only while waiting.
	Position int64
	// Seq is the user's arrival sequence number in the room.
	Seq int64
	// LeaseExpires is when an admission ends unless released; meaningful
	// only while admitted. It is Redis server time.
	LeaseExpires time.Time
	// Created is set by Store.Join when this call put the user in the
	// queue (false when it returned an existing ticket).
	Created bool
}

// RoomStats are a room's counters.
type RoomStats struct {
	Capacity      int64
	Active        int64
	Waiting       int64
	JoinedTotal   int64
	AdmittedTotal int64
	ReleasedTotal int64
	ExpiredTotal  int64
	LeftTotal     int64
	// OldestWait is how long the user at the head of the queue has waited,
	// by the store's clock; zero when nobody waits.
	OldestWait time.Duration
}

// AdmitResult is what one admission pass did.
type AdmitResult struct {
	// Admitted are the users let in, in queue order.
	Admitted []string
	// Expired counts leases reclaimed by this pass.
	Expired int
	// RoundTrips counts requests sent to the store.
	RoundTrips int
	// Skipped is true when the pass did nothing because another instance
	// leads this tick (ModeLeader).
	Skipped bool
	// At is the store's clock when the pass began.
	At time.Time
	// AdmittedAt holds, for each admitted user, the store's clock when
	// they left the queue; leases run from it.
	AdmittedAt []time.Time
}

// Store keeps rooms and tickets. Every method is safe for concurrent use by
// any number of service instances sharing the store.
type Store interface {
	// Configure creates a room or changes its configuration.
	Configure(ctx context.Context, room string, cfg RoomConfig) error
	// Config returns a room's configuration, or ErrNoRoom.
	Config(ctx context.Context, room string) (RoomConfig, error)
	// Join puts user at the back of room's queue, or returns their ticket
	// unchanged if they are waiting or admitted already (idempotent).
	Join(ctx context.Context, room, user string) (Ticket, error)
	// Ticket returns user's ticket, or ErrNoTicket.
	Ticket(ctx context.Context, room, user string) (Ticket, error)
	// Leave takes a waiting user out of the queue (left) or ends an
	// admitted user's lease (released). Leaving twice is not an error.
	Leave(ctx context.Context, room, user string) (Ticket, error)
	// Admit runs one admission pass in mode, on behalf of instance.
	Admit(ctx context.Context, room string, mode Mode, instance string) (AdmitResult, error)
	// NextExpiry returns the earliest lease expiry in the room, if any.
	NextExpiry(ctx context.Context, room string) (time.Time, bool, error)
	// Stats returns the room's counters.
	Stats(ctx context.Context, room string) (RoomStats, error)
	// Rooms lists every configured room, so that each instance finds the
	// rooms it must admit for.
	Rooms(ctx context.Context) ([]string, error)
	// Ping checks that the store answers (for /readyz).
	Ping(ctx context.Context) error
}

// Errors a Store returns.
var (
	// ErrNoRoom means the room was never configured.
	ErrNoRoom = errors.New("waitroom: no such room")
	// ErrNoTicket means the user never joined the room.
	ErrNoTicket = errors.New("waitroom: no such ticket")
)
