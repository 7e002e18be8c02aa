package waitroom

import (
	"net"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stampede-lab/stampede"
)

// RoomTemplate brands a room's waiting page. Every field is optional; the
// page renders each one escaped (html/template), so that no field can
// inject markup or script.
type RoomTemplate struct {
	// Title replaces the page's heading and document title.
	Title string `json:"title,omitempty"`
	// LogoURL is an image shown above the title: https, or http on a
	// loopback host (for local testing).
	LogoURL string `json:"logo_url,omitempty"`
	// PrimaryColor colours the progress bar and buttons, as #rrggbb.
	PrimaryColor string `json:"primary_color,omitempty"`
	// BackgroundColor is the page's background, as #rrggbb.
	BackgroundColor string `json:"background_color,omitempty"`
	// TextKO and TextEN are a paragraph for buyers (plain text, line
	// breaks kept) in Korean and in English.
	TextKO string `json:"text_ko,omitempty"`
	TextEN string `json:"text_en,omitempty"`
}

// The longest template fields, in characters.
const (
	maxTemplateTitle = 120
	maxTemplateText  = 2000
	maxTemplateURL   = 2048
)

// IsZero reports whether the template sets nothing.
func (t RoomTemplate) IsZero() bool { return t == RoomTemplate{} }

// Validate reports every unusable field at once, each by its JSON name
// under "template" ("template.title"), as the room's configuration nests
// it.
func (t RoomTemplate) Validate() error {
	var f stampede.Fields
	f.Check("", templateText("template.title", t.Title, maxTemplateTitle, false))
	f.Check("", templateText("template.text_ko", t.TextKO, maxTemplateText, true))
	f.Check("", templateText("template.text_en", t.TextEN, maxTemplateText, true))
	for _, c := range []struct{ field, v string }{
		{"template.primary_color", t.PrimaryColor}, {"template.background_color", t.BackgroundColor},
	} {
		if c.v != "" && !isHexColor(c.v) {
			f.Add(c.field, "must be a colour as #rrggbb, got %q", c.v)
		}
	}
	if t.LogoURL != "" {
		f.Check("", ValidLogoURL(t.LogoURL))
	}
	return f.Err()
}

// templateText checks a text field: valid UTF-8, at most limit
// characters, no control characters (but line breaks where multiline).
func templateText(field, s string, limit int, multiline bool) error {
	if !utf8.ValidString(s) {
		return fieldError(field, "must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > limit {
		return fieldError(field, "must be at most %d characters, got %d", limit, n)
	}
	for _, r := range s {
		if multiline && r == '\n' {
			continue
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fieldError(field, "must not contain control characters")
		}
	}
	return nil
}

// isHexColor reports whether s is #rrggbb.
func isHexColor(s string) bool {
	if len(s) != 7 || s[0] != '#' {
		return false
	}
	for i := 1; i < 7; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// ValidLogoURL accepts an absolute https URL, or http on a loopback host,
// without credentials.
func ValidLogoURL(s string) error {
	const field = "template.logo_url"
	if len(s) > maxTemplateURL {
		return fieldError(field, "must be at most %d bytes", maxTemplateURL)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.Opaque != "" {
		return fieldError(field, "must be an absolute https URL without credentials")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '\'' || r == '"' || r == '\\' {
			return fieldError(field, "must not contain spaces, quotes or control characters")
		}
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fieldError(field, "must be https (or http on a loopback host), got scheme %q", u.Scheme)
}

// LogoOrigin is the scheme://host[:port] of a valid logo URL, for the
// page's Content-Security-Policy.
func LogoOrigin(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + u.Host
}
