package gate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// HeaderBypass carries a signed bypass for monitoring: "<expiry unix
// seconds>.<hex HMAC-SHA256 of the expiry under Rules.BypassSecret>". A
// request carrying a valid, unexpired one goes through without a room.
const HeaderBypass = "Stampede-Bypass"

// MaxBypassLifetime bounds how far ahead a bypass header's expiry may be.
const MaxBypassLifetime = 24 * time.Hour

// Rules decide, for a forward-auth server, which requests need a room and
// which: bypass rules first (let through without a room), then the first
// room rule whose host and path prefix match, then Unmatched. JSON, as
// `serve forward-auth --rules FILE` reads it:
//
//	{"rooms": [{"host": "tickets.example", "path_prefix": "/concert/", "room": "concert"}],
//	 "bypass": {"path_prefixes": ["/static/", "/healthz"], "cidrs": ["10.0.0.0/8"], "secret": "..."},
//	 "unmatched": "room"}
type Rules struct {
	// Rooms are tried in order; the first that matches names the room.
	Rooms []RoomRule `json:"rooms"`
	// Bypass lets requests through without a room.
	Bypass Bypass `json:"bypass"`
	// Unmatched is what a request no rule matches gets: "room" (the
	// server's --room guards it; the default), "allow" (straight
	// through) or "deny" (403).
	Unmatched string `json:"unmatched"`
}

// RoomRule sends requests for Host (any host when empty) whose path starts
// with PathPrefix (every path when empty) to Room.
type RoomRule struct {
	Host       string `json:"host"`
	PathPrefix string `json:"path_prefix"`
	Room       string `json:"room"`
}

// Bypass are the requests let through without a room: static assets and
// health checks by path prefix, addresses in CIDRs (an office, the admin
// network; the address is the one the proxy saw, the last of
// X-Forwarded-For, else X-Real-IP, else the connection's), and a valid
// HeaderBypass signed with Secret.
type Bypass struct {
	PathPrefixes []string `json:"path_prefixes"`
	CIDRs        []string `json:"cidrs"`
	// Secret signs HeaderBypass values (at least 32 bytes); empty turns
	// the header off.
	Secret string `json:"secret"`

	prefixes []netip.Prefix
}

// The values of Rules.Unmatched.
const (
	UnmatchedRoom  = "room"
	UnmatchedAllow = "allow"
	UnmatchedDeny  = "deny"
)

// Validate reports every bad field of r by its JSON path (rooms[1].room,
// bypass.cidrs[0], ...), and parses the CIDRs.
func (r *Rules) Validate() error {
	var f stampede.Fields
	for i, rr := range r.Rooms {
		at := fmt.Sprintf("rooms[%d]", i)
		if err := waitroom.ValidateRoom(rr.Room); err != nil {
			f.Add(at+".room", "%s", stampede.As(err).Message)
		}
		if rr.Host != "" && (strings.ContainsAny(rr.Host, "/ \t\r\n") || len(rr.Host) > 253) {
			f.Add(at+".host", "must be a host name (with an optional :port), got %q", rr.Host)
		}
		if rr.PathPrefix != "" && (!strings.HasPrefix(rr.PathPrefix, "/") || strings.ContainsAny(rr.PathPrefix, "?# \t\r\n")) {
			f.Add(at+".path_prefix", "must be a path starting with /, without query, got %q", rr.PathPrefix)
		}
	}
	for i, p := range r.Bypass.PathPrefixes {
		if !strings.HasPrefix(p, "/") || p == "/" || strings.ContainsAny(p, "?# \t\r\n") {
			f.Add(fmt.Sprintf("bypass.path_prefixes[%d]", i), "must be a path starting with / (not / alone), got %q", p)
		}
	}
	r.Bypass.prefixes = nil
	for i, c := range r.Bypass.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			f.Add(fmt.Sprintf("bypass.cidrs[%d]", i), "must be a CIDR such as 10.0.0.0/8, got %q", c)
			continue
		}
		r.Bypass.prefixes = append(r.Bypass.prefixes, p.Masked())
	}
	if r.Bypass.Secret != "" && len(r.Bypass.Secret) < 32 {
		f.Add("bypass.secret", "must be at least 32 bytes, got %d", len(r.Bypass.Secret))
	}
	switch r.Unmatched {
	case "", UnmatchedRoom, UnmatchedAllow, UnmatchedDeny:
	default:
		f.Add("unmatched", "must be room, allow or deny, got %q", r.Unmatched)
	}
	return f.Err()
}

// decision is what the rules say of one request.
type decision struct {
	room  string // the room guarding it; "" with allow or deny
	allow bool   // straight through
	deny  bool   // refused
}

// decide applies the rules to orig (the request the proxy asks about),
// with defaultRoom for unmatched requests under UnmatchedRoom.
func (r *Rules) decide(orig *http.Request, defaultRoom string, now time.Time) decision {
	p := orig.URL.Path
	for _, bp := range r.Bypass.PathPrefixes {
		if strings.HasPrefix(p, bp) {
			return decision{allow: true}
		}
	}
	if len(r.Bypass.prefixes) > 0 {
		if ip, ok := proxiedAddr(orig); ok {
			for _, pf := range r.Bypass.prefixes {
				if pf.Contains(ip) {
					return decision{allow: true}
				}
			}
		}
	}
	if r.Bypass.Secret != "" && ValidBypass(orig.Header.Get(HeaderBypass), r.Bypass.Secret, now) {
		return decision{allow: true}
	}
	host := strings.ToLower(firstHeader(orig, "X-Forwarded-Host"))
	if host == "" {
		host = strings.ToLower(orig.Host)
	}
	for _, rr := range r.Rooms {
		if rr.Host != "" && !strings.EqualFold(rr.Host, host) && !strings.EqualFold(rr.Host, hostOnly(host)) {
			continue
		}
		if rr.PathPrefix != "" && !strings.HasPrefix(p, rr.PathPrefix) {
			continue
		}
		return decision{room: rr.Room}
	}
	switch r.Unmatched {
	case UnmatchedAllow:
		return decision{allow: true}
	case UnmatchedDeny:
		return decision{deny: true}
	}
	return decision{room: defaultRoom}
}

// hostOnly drops a port from host.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// proxiedAddr is the client address the proxy saw: the last entry of
// X-Forwarded-For (the one the proxy added), else X-Real-IP, else the
// connection's peer.
func proxiedAddr(r *http.Request) (netip.Addr, bool) {
	v := ""
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		last := xff[len(xff)-1]
		v = strings.TrimSpace(last[strings.LastIndex(last, ",")+1:])
	}
	if v == "" {
		v = strings.TrimSpace(r.Header.Get("X-Real-IP"))
	}
	if v == "" {
		if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			v = h
		}
	}
	ip, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// SignBypass returns a HeaderBypass value valid until expires, signed with
// secret: give it to a monitor that must reach the checkout whatever the
// queue.
func SignBypass(secret string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("stampede-bypass:" + exp))
	return exp + "." + hex.EncodeToString(m.Sum(nil))
}

// ValidBypass reports whether v is a HeaderBypass value signed with secret,
// not expired at now and expiring within MaxBypassLifetime of now.
func ValidBypass(v, secret string, now time.Time) bool {
	exp, _, ok := strings.Cut(v, ".")
	if !ok || len(v) > 100 {
		return false
	}
	sec, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return false
	}
	at := time.Unix(sec, 0)
	if !now.Before(at) || at.After(now.Add(MaxBypassLifetime)) {
		return false
	}
	return hmac.Equal([]byte(v), []byte(SignBypass(secret, at)))
}
