// Package waitroom is a waiting room in front of a checkout with a fixed
// capacity: users join a FIFO queue, an admitter lets them into the room
// while it has free slots, and every admission holds a lease that ends when
// the user releases the slot or the lease expires.
//
// The invariant: at every instant the room holds at most Capacity admitted
// users, however many service instances admit at once. Every user who joined
// ends admitted, released, expired, left, closed or abandoned, and a waiting
// user's position never increases, except when a user set aside for not
// polling (RoomConfig.AbandonAfter) comes back to their place ahead.
//
// The domain lives here; the Redis implementation of Store is in
// waitroom/redisstore. A room is admitted to in one atomic step
// (Store.Admit); the older, unsafe algorithms the admission lab compares
// it with live in the lab, as stores wrapping a real one.
package waitroom

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
)

// Mode names how an admission pass moves users from the queue into the
// room: the label of the pass metrics (ServiceConfig.OnPass). A Service
// always admits with Store.Admit, ModeAtomic.
type Mode string

// ModeAtomic reclaims expired leases, counts and admits in one server-side
// step: never observable over capacity, FIFO kept.
const ModeAtomic Mode = "atomic"

// State is where a user stands in a room.
type State string

// The states of a ticket.
const (
	StateWaiting  State = "waiting"
	StateAdmitted State = "admitted"
	StateReleased State = "released" // left the room on their own
	StateExpired  State = "expired"  // the lease ran out
	StateLeft     State = "left"     // left the queue before admission
	// StateClosed: the room closed (sold out) while the user waited; the
	// ticket carries the room's closing message.
	StateClosed State = "closed"
	// StateAbandoned: the user stopped polling for longer than the room's
	// AbandonAfter, lost their place, and did not come back within the
	// following AbandonAfter.
	StateAbandoned State = "abandoned"
)

// Done reports whether s is final: the user holds neither a place nor a
// slot, and their ticket is kept only for the room's Retention.
func (s State) Done() bool {
	switch s {
	case StateReleased, StateExpired, StateLeft, StateClosed, StateAbandoned:
		return true
	}
	return false
}

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

// ValidateUser checks a user id: 1 to MaxUserLen bytes of printable UTF-8,
// safe as one URL path segment: not "." or "..", and without '/' or '\\'
// (a ticket's URL is /v1/rooms/{room}/tickets/{user}; such ids would be
// redirected or split by clients and proxies).
func ValidateUser(id string) error {
	if len(id) == 0 || len(id) > MaxUserLen {
		return fieldError("user_id", "must be 1 to %d bytes, got %d", MaxUserLen, len(id))
	}
	if id == "." || id == ".." {
		return fieldError("user_id", "must not be %q (not a usable path segment)", id)
	}
	if strings.ContainsAny(id, "/\\") {
		return fieldError("user_id", "must not contain '/' or '\\' (it is a path segment of the ticket's URL)")
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

// RoomConfig configures one room. The JSON names of its fields (in
// RoomConfigFields) are the API's.
type RoomConfig struct {
	// Capacity is the most users the room holds at once.
	Capacity int
	// Lease is how long an admission lasts unless released.
	Lease time.Duration
	// AdmitInterval is the admitter's tick.
	AdmitInterval time.Duration
	// MaxAdmissionsPerMinute limits the outflow from the queue into the
	// room, whatever the free capacity (0: no limit). It is a token bucket
	// in the store, refilled continuously by the store's clock and holding
	// at most one second's worth (at least one admission), so no minute
	// admits more than the limit plus that second's worth.
	MaxAdmissionsPerMinute int
	// OpensAt, when set, opens the room at that instant: nobody is
	// admitted before it, and everyone who joined before it (the
	// pre-queue) is put in a random order, once, by the first admission
	// pass after it. Users who join later queue behind them, first come
	// first served.
	OpensAt time.Time
	// ClosesAt, when set, ends the sale at that instant as Closed does
	// (see Closed), without anyone having to set it: no new joins, waiting
	// users are told, admitted users keep their leases.
	ClosesAt time.Time
	// Schedule, when set, sells in windows, each with its own capacity
	// and outflow (see Window and SaleAt): the first window's start opens
	// the room (OpensAt must then be unset; the pre-queue is shuffled
	// then), nobody is admitted between windows, and the room closes at
	// the end of the last window (if it has one) or at ClosesAt. Capacity
	// and MaxAdmissionsPerMinute are then those of no window.
	Schedule []Window
	// InviteOnly takes joins only with an invite (see Invite), in every
	// window; Window.InviteOnly does so for one window.
	InviteOnly bool
	// InviteKey is the Ed25519 public key (base64url) that verifies the
	// room's invites; required when the room or a window is invite-only.
	InviteKey string
	// Paused stops admission; the queue keeps its order and leases run on.
	Paused bool
	// Closed ends the sale: every waiting user is told (their ticket reads
	// StateClosed with ClosedMessage) and leaves the queue; nobody can
	// join. Admitted users keep their slots until they release or expire.
	Closed bool
	// ClosedMessage is what closed tickets show, such as "sold out".
	ClosedMessage string
	// AbandonAfter, when set, takes a waiting user who has not read their
	// ticket for that long out of the queue. They get their place back by
	// reading their ticket (or joining) within another AbandonAfter;
	// after that their ticket is StateAbandoned.
	AbandonAfter time.Duration
	// Arrival, when set, releases an admitted user who has not arrived
	// within it (see Store.MarkArrived): the first ticket read after the
	// admission, or an admission check, is the arrival. Keep it above the
	// longest poll interval (ServiceConfig.MaxPoll).
	Arrival time.Duration
	// Retention is how long a finished ticket (left, released, expired,
	// closed, abandoned) is kept, for its holder to read, before every
	// trace of the user is removed from the store.
	Retention time.Duration
	// PoWDifficulty is the leading zero bits of the proof of work a join
	// must carry (see GET /v1/rooms/{room}/challenge); 0 turns it off.
	PoWDifficulty int
	// Template brands the room's waiting page; the zero value is the
	// plain page.
	Template RoomTemplate
	// QueueShards spreads the waiting line over that many storage shards
	// (Redis hash slots), so that joins to one room are not bound by one
	// shard's CPU; 0 or 1 is one queue, as before. The admitted set and so
	// the exact capacity stay in one place. It is fixed when the room is
	// created. Not one of RoomConfigFields: a PUT may leave it out.
	QueueShards int
	// MaxWaiting bounds the users waiting in the queue at once: a join
	// that would pass it is refused (ErrLineFull: 503 with Retry-After,
	// "the line is full"), so that no crowd, however many addresses it
	// has, grows the store without bound. A user already in the line
	// keeps their place and may read or re-join. In a sharded room each
	// shard holds at most its share (rounded up). 0 turns it off.
	MaxWaiting int
	// MaxJoinsPerSecond bounds the room's new joins, whatever their
	// addresses: a token bucket in the store holding one second's worth,
	// refilled continuously; a join without a token is refused
	// (ErrJoinsThrottled: 503 with Retry-After). A sharded room gives
	// each shard its share. 0 turns it off.
	MaxJoinsPerSecond int
}

// DefaultMaxWaiting is the default bound on a room's waiting line: one
// million users, about 600 MB of Redis at the ~600 bytes each user costs.
const DefaultMaxWaiting = 1_000_000

// MaxQueueShards is the most queue shards a room may have.
const MaxQueueShards = 64

// RoomConfigFields are the JSON names of RoomConfig's fields, in the
// order the API documents them: a PUT must name every one.
var RoomConfigFields = []string{
	"capacity", "lease_seconds", "admit_interval_ms", "max_admissions_per_minute", "opens_at",
	"paused", "closed", "closed_message", "abandon_after_seconds", "arrival_seconds", "retention_seconds",
	"pow_difficulty", "template", "max_waiting", "max_joins_per_second",
	"closes_at", "schedule", "invite_only", "invite_key",
}

// DefaultRetention is how long finished tickets are kept by default.
const DefaultRetention = 24 * time.Hour

// DefaultAbandonAfter is a room's default AbandonAfter: a closed tab's
// place is set aside two minutes after its last poll and given up two
// minutes later, while a background tab that a browser lets poll only
// once a minute keeps it.
const DefaultAbandonAfter = 2 * time.Minute

// DefaultArrival is a room's default Arrival: an admission nobody reads
// (a closed tab; the page reads an admitted ticket every few seconds)
// frees its slot after a minute instead of the whole lease. A room whose
// lease is shorter gets the lease as its arrival window.
const DefaultArrival = time.Minute

// DefaultRoomConfig is an open room of 100 with 5-minute leases, admitting
// every 200 ms without an outflow limit, abandoning places unpolled for
// DefaultAbandonAfter and admissions not arrived within DefaultArrival,
// keeping finished tickets for DefaultRetention, with a line of at most
// DefaultMaxWaiting and no join rate bound.
func DefaultRoomConfig() RoomConfig {
	return RoomConfig{Capacity: 100, Lease: 5 * time.Minute, AdmitInterval: 200 * time.Millisecond, Retention: DefaultRetention,
		MaxWaiting: DefaultMaxWaiting, AbandonAfter: DefaultAbandonAfter, Arrival: DefaultArrival}
}

// Validate reports every unusable field at once, each by its JSON name
// (the template's under "template.").
func (c RoomConfig) Validate() error {
	var f stampede.Fields
	if c.Capacity < 1 || c.Capacity > 1_000_000 {
		f.Add("capacity", "must be between 1 and 1000000, got %d", c.Capacity)
	}
	leaseOK := c.Lease >= time.Second && c.Lease <= 24*time.Hour
	if !leaseOK {
		f.Add("lease_seconds", "must be between 1 and 86400, got %v", c.Lease.Seconds())
	}
	if c.AdmitInterval < 10*time.Millisecond || c.AdmitInterval > time.Minute {
		f.Add("admit_interval_ms", "must be between 10 and 60000, got %d", c.AdmitInterval.Milliseconds())
	}
	if c.MaxAdmissionsPerMinute < 0 || c.MaxAdmissionsPerMinute > 60_000_000 {
		f.Add("max_admissions_per_minute", "must be between 0 (no limit) and 60000000, got %d", c.MaxAdmissionsPerMinute)
	}
	if !c.OpensAt.IsZero() && (c.OpensAt.Year() < 2000 || c.OpensAt.Year() > 9999) {
		f.Add("opens_at", "must be a time between the years 2000 and 9999, got %s", c.OpensAt)
	}
	if len(c.ClosedMessage) > 500 {
		f.Add("closed_message", "must be at most 500 bytes, got %d", len(c.ClosedMessage))
	}
	if c.AbandonAfter != 0 && (c.AbandonAfter < time.Second || c.AbandonAfter > 24*time.Hour) {
		f.Add("abandon_after_seconds", "must be 0 (off) or between 1 and 86400, got %v", c.AbandonAfter.Seconds())
	}
	// The arrival bound is the lease: checked only against a usable one.
	if leaseOK && c.Arrival != 0 && (c.Arrival < time.Second || c.Arrival > c.Lease) {
		f.Add("arrival_seconds", "must be 0 (off) or between 1 and lease_seconds (%v), got %v", c.Lease.Seconds(), c.Arrival.Seconds())
	}
	if c.Retention < time.Second || c.Retention > 30*24*time.Hour {
		f.Add("retention_seconds", "must be between 1 and 2592000, got %v", c.Retention.Seconds())
	}
	if c.QueueShards < 0 || c.QueueShards > MaxQueueShards {
		f.Add("queue_shards", "must be between 0 (one queue) and %d, got %d", MaxQueueShards, c.QueueShards)
	}
	if c.MaxWaiting < 0 || c.MaxWaiting > 100_000_000 {
		f.Add("max_waiting", "must be between 0 (no bound) and 100000000, got %d", c.MaxWaiting)
	}
	if c.MaxJoinsPerSecond < 0 || c.MaxJoinsPerSecond > 1_000_000 {
		f.Add("max_joins_per_second", "must be between 0 (no bound) and 1000000, got %d", c.MaxJoinsPerSecond)
	}
	if c.PoWDifficulty < 0 || c.PoWDifficulty > MaxPoWDifficulty {
		f.Add("pow_difficulty", "must be between 0 (off) and %d bits, got %d", MaxPoWDifficulty, c.PoWDifficulty)
	}
	c.validateSchedule(&f)
	inviteOnly := c.InviteOnly
	for _, w := range c.Schedule {
		inviteOnly = inviteOnly || w.InviteOnly
	}
	if c.InviteKey != "" {
		if _, err := decodeInviteKey(c.InviteKey); err != nil {
			f.Add("invite_key", "%s", err.Error())
		}
	} else if inviteOnly {
		f.Add("invite_key", "is required when invite_only is set (for the room or a window of its schedule)")
	}
	// The template names its fields "template.title" and so on already.
	f.Check("", c.Template.Validate())
	return f.Err()
}

// Ticket is one user's place in one room.
type Ticket struct {
	Room  string
	User  string
	State State
	// Position counts the users ahead in the queue (0 is next); meaningful
	// only while waiting.
	Position int64
	// Seq is the user's arrival sequence number in the room; in a
	// pre-queue shuffled at opening, the number of their place in the
	// draw. Admitted users hold rising numbers in the order they were let
	// in, and an admission token carries its holder's.
	Seq int64
	// LeaseExpires is when an admission ends unless released; meaningful
	// only while admitted. It is Redis server time.
	LeaseExpires time.Time
	// Generation identifies this join of the user in the room (the
	// store's join time in ms, later than any earlier join's of the
	// user): the same from the join until the ticket is forgotten, and
	// different for the user's next join. A ticket token carries it, so
	// that a token reads and releases one join only. 0 when unknown.
	Generation int64
	// Created is set by Store.Join when this call put the user in the
	// queue (false when it returned an existing ticket).
	Created bool
	// Message is the room's closing message when State is StateClosed.
	Message string
	// Marks are the room's counters as the store read that put this
	// waiting ticket's Position (nil when the store does not report
	// them, or the user is not waiting): what a Place is built from.
	Marks *Marks
	// Place is what this waiting ticket's token may carry so that later
	// polls are answered from a room view (see Service.Poll); set by the
	// Service on a ticket read from the store, nil otherwise.
	Place *Place
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
	// ClosedTotal counts users told the room closed while they waited.
	ClosedTotal int64
	// AbandonedTotal counts users whose place was given up for good.
	AbandonedTotal int64
	// Away counts users out of the queue for not polling, who get their
	// place back if they return within the room's AbandonAfter.
	Away int64
	// NoShowTotal counts admissions released because the user did not
	// arrive within the room's Arrival (they are counted expired too).
	NoShowTotal int64
	// InvitesUsed counts the invites that got a place; InvitesHeld is
	// how many the store remembers as used (see InviteStore); and
	// InvitesRefused counts joins refused for an invite used already.
	InvitesUsed, InvitesHeld, InvitesRefused int64
	// OldestWait is how long the user at the head of the queue has waited,
	// by the store's clock; zero when nobody waits.
	OldestWait time.Duration
}

// AdmitResult is what one admission pass did.
type AdmitResult struct {
	// Admitted are the users let in, in queue order.
	Admitted []string
	// Expired counts leases reclaimed by this pass (no-shows included).
	Expired int
	// Shuffled counts the pre-queue users this pass put in random order
	// (the first pass after the room's OpensAt).
	Shuffled int
	// RoundTrips counts requests sent to the store.
	RoundTrips int
	// Skipped is true when the pass did nothing because another instance
	// leads this tick (a leader-elected pass, as the admission lab's).
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
	// Configure creates a room or replaces its whole configuration.
	Configure(ctx context.Context, room string, cfg RoomConfig) error
	// UpdateConfig sets only the named fields (JSON names, see
	// RoomConfigFields) of an existing room to cfg's values, in one atomic
	// step, or returns ErrNoRoom. The caller has validated cfg as a whole.
	UpdateConfig(ctx context.Context, room string, cfg RoomConfig, fields []string) error
	// Config returns a room's configuration, or ErrNoRoom.
	Config(ctx context.Context, room string) (RoomConfig, error)
	// DeleteRoom removes a room and every trace of its users. Instances
	// stop admitting for it at their next room refresh. Deleting a room
	// that does not exist is not an error.
	DeleteRoom(ctx context.Context, room string) error
	// Join puts user at the back of room's queue, or returns their ticket
	// unchanged if they are waiting or admitted already (idempotent). A
	// user away for not polling gets their place back. In a closed room
	// it returns a StateClosed ticket and queues nobody.
	Join(ctx context.Context, room, user string) (Ticket, error)
	// Ticket returns user's ticket, or ErrNoTicket. Reading counts as the
	// user polling: it keeps (or gives back) a waiting user's place, and
	// marks an admitted user arrived (see MarkArrived).
	Ticket(ctx context.Context, room, user string) (Ticket, error)
	// MarkArrived records that an admitted user reached the checkout, so
	// that the room's Arrival check does not release them. It returns the
	// user's ticket; marking twice, or a user not admitted, changes
	// nothing.
	MarkArrived(ctx context.Context, room, user string) (Ticket, error)
	// Leave takes a waiting user out of the queue (left) or ends an
	// admitted user's lease (released). Leaving twice is not an error.
	Leave(ctx context.Context, room, user string) (Ticket, error)
	// Admit runs one atomic admission pass: it reclaims run-out leases and
	// no-shows, sets aside users who stopped polling, tells waiting users
	// a closed room closed, shuffles the pre-queue once the room opens,
	// forgets users finished for longer than the retention, and admits up
	// to the free capacity and the outflow limit, in queue order, unless
	// the room is paused, closed or not yet open. The room is never
	// observable over capacity.
	Admit(ctx context.Context, room string) (AdmitResult, error)
	// NextExpiry returns the earliest lease expiry in the room, if any.
	NextExpiry(ctx context.Context, room string) (time.Time, bool, error)
	// Stats returns the room's counters.
	Stats(ctx context.Context, room string) (RoomStats, error)
	// Rooms lists every configured room, so that each instance finds the
	// rooms it must admit for.
	Rooms(ctx context.Context) ([]string, error)
	// Ping checks that the store answers (for /readyz).
	Ping(ctx context.Context) error
	// View reads, in one call whatever the crowd, what a waiting buyer's
	// answer needs (see RoomView), or ErrNoRoom. It changes nothing.
	View(ctx context.Context, room string) (RoomView, error)
}

// Errors a Store returns.
var (
	// ErrNoRoom means the room was never configured.
	ErrNoRoom = errors.New("waitroom: no such room")
	// ErrNoTicket means the user never joined the room.
	ErrNoTicket = errors.New("waitroom: no such ticket")
	// ErrLineFull refuses a join to a room whose line holds MaxWaiting
	// users.
	ErrLineFull = &Error{Code: CodeLineFull, Kind: stampede.Unavailable, RetryAfter: LineFullRetry,
		Message: "the line is full; try again later"}
	// ErrJoinsThrottled refuses a join past the room's MaxJoinsPerSecond.
	ErrJoinsThrottled = &Error{Code: CodeJoinsThrottled, Kind: stampede.Unavailable, RetryAfter: time.Second,
		Message: "too many people are joining this line right now; try again in a second"}
)

// LineFullRetry is the Retry-After of ErrLineFull.
const LineFullRetry = 30 * time.Second
