package waitroom

import (
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/bits"
	"sync"
	"time"

	"github.com/stampede-lab/stampede"
)

// A proof of work makes every join of a room cost the client some CPU: the
// server issues a challenge, and the join must carry a solution such that
// SHA-256(challenge || solution) starts with Difficulty zero bits (hashcash).
// A challenge is self-contained and signed (no storage at issue), bound to
// its room, expires, and is accepted once: spent challenges are remembered
// until they expire, in memory, per instance.

// MaxPoWDifficulty is the highest difficulty a room may ask for, in bits.
// At 24 bits a page needs tens of seconds (see docs/waitroom.md).
const MaxPoWDifficulty = 28

// challengeVersion is the first byte of every challenge.
const challengeVersion = 1

// The parts of a challenge, in bytes: version, difficulty, expiry (Unix
// seconds, big endian), random nonce, truncated HMAC-SHA256. Encoded in
// unpadded base64url it is 43 characters, so that challenge and a solution
// of up to 12 characters fit one SHA-256 block.
const (
	challengeNonceLen = 10
	challengeMACLen   = 16
	challengeLen      = 1 + 1 + 4 + challengeNonceLen + challengeMACLen
	// MaxSolutionLen is the longest solution accepted, in bytes.
	MaxSolutionLen = 32
)

// PoWConfig configures the challenges of the proof of work.
type PoWConfig struct {
	// TTL is how long a challenge can be used after it is issued.
	TTL time.Duration
	// MaxSpent bounds the spent challenges remembered until they expire.
	// When it is full of unexpired challenges, joins that carry a
	// challenge answer 503 busy until some expire.
	MaxSpent int
}

// DefaultPoWConfig gives 5-minute challenges and remembers up to 200,000
// spent ones (about 20 MB).
func DefaultPoWConfig() PoWConfig { return PoWConfig{TTL: 5 * time.Minute, MaxSpent: 200_000} }

// Validate reports every unusable field by its snake_case name.
func (c PoWConfig) Validate() error {
	var f stampede.Fields
	if c.TTL < time.Second || c.TTL > time.Hour {
		f.Add("ttl", "must be between 1s and 1h, got %s", c.TTL)
	}
	if c.MaxSpent < 1 {
		f.Add("max_spent", "must be at least 1, got %d", c.MaxSpent)
	}
	return f.Err()
}

// Challenge is a decoded challenge.
type Challenge struct {
	// Difficulty is the leading zero bits a solution must reach.
	Difficulty int
	// Expires is when the challenge stops being accepted (whole seconds).
	Expires time.Time
	// Nonce makes the challenge unique.
	Nonce [challengeNonceLen]byte
	// MAC signs the other fields and the room.
	MAC [challengeMACLen]byte
}

// ParseChallenge decodes a challenge string without checking its
// signature, expiry or difficulty.
func ParseChallenge(s string) (Challenge, error) {
	var c Challenge
	if len(s) != b64.EncodedLen(challengeLen) {
		return c, errors.New("malformed challenge")
	}
	raw, err := b64.DecodeString(s)
	if err != nil || len(raw) != challengeLen || raw[0] != challengeVersion {
		return c, errors.New("malformed challenge")
	}
	c.Difficulty = int(raw[1])
	c.Expires = time.Unix(int64(binary.BigEndian.Uint32(raw[2:6])), 0)
	copy(c.Nonce[:], raw[6:6+challengeNonceLen])
	copy(c.MAC[:], raw[6+challengeNonceLen:])
	return c, nil
}

// ValidSolution reports whether solution is acceptable as text: 1 to
// MaxSolutionLen characters of [0-9A-Za-z._-].
func ValidSolution(solution string) bool {
	if len(solution) == 0 || len(solution) > MaxSolutionLen {
		return false
	}
	for i := 0; i < len(solution); i++ {
		c := solution[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// LeadingZeroBits counts the zero bits at the start of sum.
func LeadingZeroBits(sum []byte) int {
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// SolvesChallenge reports whether SHA-256(challenge || solution) has at
// least difficulty leading zero bits.
func SolvesChallenge(challenge, solution string, difficulty int) bool {
	sum := sha256.Sum256([]byte(challenge + solution))
	return LeadingZeroBits(sum[:]) >= difficulty
}

// PoWIssuer issues and checks proof-of-work challenges. It is safe for
// concurrent use.
type PoWIssuer struct {
	key []byte
	cfg PoWConfig
	now func() time.Time

	mu    sync.Mutex
	spent map[string]time.Time
	byExp spentHeap
}

// NewPoWIssuer returns an issuer whose challenges are keyed by a key
// derived from secret (so that every instance with one secret accepts the
// others' challenges).
func NewPoWIssuer(secret []byte, cfg PoWConfig, now func() time.Time) *PoWIssuer {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("stampede waitroom proof-of-work challenge key v1"))
	return &PoWIssuer{key: m.Sum(nil), cfg: cfg, now: now, spent: map[string]time.Time{}}
}

// mac signs a challenge's fields for room.
func (p *PoWIssuer) mac(room string, fields []byte) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write(fields)
	m.Write([]byte(room))
	return m.Sum(nil)[:challengeMACLen]
}

// Issue returns a new challenge for room at difficulty and its expiry.
func (p *PoWIssuer) Issue(room string, difficulty int) (string, time.Time) {
	exp := p.now().Add(p.cfg.TTL).Truncate(time.Second)
	raw := make([]byte, 0, challengeLen)
	raw = append(raw, challengeVersion, byte(difficulty))
	raw = binary.BigEndian.AppendUint32(raw, uint32(exp.Unix()))
	var nonce [challengeNonceLen]byte
	rand.Read(nonce[:])
	raw = append(raw, nonce[:]...)
	raw = append(raw, p.mac(room, raw)...)
	return b64.EncodeToString(raw), exp
}

// Check accepts a solved, unexpired, unspent challenge of room issued at
// difficulty or more, and spends it. Errors name the field at fault: an
// absent or bad challenge or solution is invalid (400), a replayed one
// forbidden (403).
func (p *PoWIssuer) Check(room string, difficulty int, challenge, solution *string) error {
	if challenge == nil || *challenge == "" {
		return &Error{Code: CodeInvalid, Field: "challenge", Extra: map[string]any{"pow_difficulty": difficulty},
			Message: "this room asks for a proof of work: GET /v1/rooms/{room}/challenge, solve it, and join with challenge and solution"}
	}
	if solution == nil || *solution == "" {
		return fieldError("solution", "is required with a challenge")
	}
	if !ValidSolution(*solution) {
		return fieldError("solution", "must be 1 to %d characters of letters, digits, '.', '_' or '-'", MaxSolutionLen)
	}
	c, err := ParseChallenge(*challenge)
	if err != nil {
		return fieldError("challenge", "is malformed; get a new one")
	}
	raw, _ := b64.DecodeString(*challenge)
	if !hmac.Equal(c.MAC[:], p.mac(room, raw[:len(raw)-challengeMACLen])) {
		return fieldError("challenge", "was not issued for this room; get a new one")
	}
	now := p.now()
	if !now.Before(c.Expires) {
		return fieldError("challenge", "has expired; get a new one")
	}
	if c.Difficulty < difficulty {
		return fieldError("challenge", "is easier than the room now asks (%d bits); get a new one", difficulty)
	}
	if !SolvesChallenge(*challenge, *solution, c.Difficulty) {
		return fieldError("solution", "does not solve the challenge")
	}
	return p.spend(*challenge, c.Expires, now)
}

// spend marks challenge used until exp, or refuses it if it was used.
func (p *PoWIssuer) spend(challenge string, exp, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.byExp) > 0 && !now.Before(p.byExp[0].exp) {
		delete(p.spent, heap.Pop(&p.byExp).(spentEntry).challenge)
	}
	if _, ok := p.spent[challenge]; ok {
		return &Error{Code: CodeForbidden, Field: "challenge", Message: "this challenge was used already; get a new one"}
	}
	if len(p.spent) >= p.cfg.MaxSpent {
		return &Error{Code: CodeBusy, Kind: stampede.Unavailable, RetryAfter: p.byExp[0].exp.Sub(now),
			Message: "too many proofs of work in flight; try again shortly"}
	}
	p.spent[challenge] = exp
	heap.Push(&p.byExp, spentEntry{challenge: challenge, exp: exp})
	return nil
}

// spentEntry is a spent challenge and its expiry.
type spentEntry struct {
	challenge string
	exp       time.Time
}

// spentHeap orders spent challenges by expiry, earliest first.
type spentHeap []spentEntry

func (h spentHeap) Len() int           { return len(h) }
func (h spentHeap) Less(i, j int) bool { return h[i].exp.Before(h[j].exp) }
func (h spentHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push implements heap.Interface.
func (h *spentHeap) Push(x any) { *h = append(*h, x.(spentEntry)) }

// Pop implements heap.Interface.
func (h *spentHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Spender is a Store that remembers spent one-time values for every
// instance on it: a proof of work spent through one instance is then
// refused by all of them, not once per instance.
type Spender interface {
	// SpendOnce records key as spent in room until until, and reports
	// false when it was spent already.
	SpendOnce(ctx context.Context, room, key string, until time.Time) (bool, error)
}

// challengeKey names a challenge in a Spender: a hash, shorter than the
// challenge.
func challengeKey(challenge string) string {
	sum := sha256.Sum256([]byte(challenge))
	return "pow:" + hex.EncodeToString(sum[:16])
}
