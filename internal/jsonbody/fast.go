package jsonbody

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// FastDecoder is a request body with a hand-written decoder for its usual
// form, which Decode tries before encoding/json (and its reflection).
//
// DecodeFast returns false, leaving the value unchanged, when data is not
// in a form it reads; Decode then decodes data with encoding/json, which
// also words any error. When it returns true it must have set the value
// exactly as encoding/json would have from data: the fast path only ever
// saves time, never changes what is accepted or how. Members does the
// reading.
type FastDecoder interface {
	DecodeFast(data []byte) bool
}

// Member is one member of a flat JSON object, as Members reads it.
type Member struct {
	// Name is the member's name as written: Members reads only names
	// without escapes, so these are its bytes.
	Name []byte
	kind memberKind
	// raw is a string's contents without the quotes, or a number's text.
	raw []byte
}

// memberKind is the kind of a Member's value.
type memberKind uint8

const (
	memberString memberKind = iota + 1
	memberNumber
	memberNull
)

// String stores a string value or null in dst as encoding/json decodes
// into a *string field: a new string, or nil for null. It reports false
// for any other value.
func (m Member) String(dst **string) bool {
	switch m.kind {
	case memberString:
		s := string(m.raw)
		*dst = &s
		return true
	case memberNull:
		*dst = nil
		return true
	}
	return false
}

// Int64 stores a whole number in range, or null, in dst as encoding/json
// decodes into an *int64 field. It reports false for anything else,
// fractions and exponents included (encoding/json rejects those for an
// integer with an error that names the field).
func (m Member) Int64(dst **int64) bool {
	switch m.kind {
	case memberNumber:
		if !wholeNumber(m.raw) {
			return false
		}
		n, err := strconv.ParseInt(string(m.raw), 10, 64)
		if err != nil {
			return false
		}
		*dst = &n
		return true
	case memberNull:
		*dst = nil
		return true
	}
	return false
}

// wholeNumber reports whether b is -?(0|[1-9][0-9]*).
func wholeNumber(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Members reads data as one flat JSON object and calls fn with each of
// its members in order. It reports false, at once, for anything it does
// not read: a name or string with an escape, a control character or
// invalid UTF-8; a nested object or array; true or false; malformed JSON;
// anything but JSON whitespace after the object; or fn returning false.
// A FastDecoder then leaves data to encoding/json.
func Members(data []byte, fn func(m Member) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		var m Member
		var ok bool
		if m.Name, i, ok = plainString(data, i); !ok {
			return false
		}
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		if i >= len(data) {
			return false
		}
		switch c := data[i]; {
		case c == '"':
			m.kind = memberString
			if m.raw, i, ok = plainString(data, i); !ok {
				return false
			}
		case c == '-' || '0' <= c && c <= '9':
			m.kind = memberNumber
			if m.raw, i, ok = number(data, i); !ok {
				return false
			}
		case c == 'n':
			if len(data)-i < 4 || string(data[i:i+4]) != "null" {
				return false
			}
			m.kind, i = memberNull, i+4
		default:
			return false
		}
		if !fn(m) {
			return false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainString reads the string starting with the quote at data[i] and
// returns its contents and the index after its closing quote. It reports
// false for a string with an escape, a control character or invalid UTF-8,
// and for an unterminated one.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	start := i + 1
	ascii := true
	for j := start; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, i, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

// number reads the JSON number starting at data[i] and returns its text
// and the index after it. It reports false for text that is not a JSON
// number.
func number(data []byte, i int) ([]byte, int, bool) {
	start := i
	if data[i] == '-' {
		i++
	}
	digits := func() bool {
		from := i
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
		return i > from
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case !digits():
		return nil, start, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if !digits() {
			return nil, start, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if !digits() {
			return nil, start, false
		}
	}
	return data[start:i], i, true
}

// hex is the digits of \u escapes.
const hex = "0123456789abcdef"

// AppendString appends s as a JSON string exactly as encoding/json's
// Marshal writes it: '<', '>' and '&' escaped for HTML, control
// characters as \b, \f, \n, \r, \t or \u00XX, U+2028 and U+2029 escaped,
// and each byte of invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendFloat appends f as encoding/json's Marshal writes a float64, and
// reports false (appending nothing) for NaN and the infinities, which it
// cannot write.
func AppendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}
