package jsonbody

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// checkStrict rejects what encoding/json would silently accept and turn
// into something else: bytes that are not UTF-8 and escaped lone
// surrogates (both read as U+FFFD, so two different raw values become
// one), and an object with a name twice or in two cases (encoding/json
// keeps the last and matches names case-insensitively, so a validator
// in front that reads the first sees another value). It returns nil for
// malformed JSON: the decoder words that error.
//
// names, when not nil, are the exact JSON names of dst's fields: a
// top-level name that matches one only in another case is refused too.
func checkStrict(data []byte, names map[string]bool) error {
	if !utf8.Valid(data) {
		return &Error{Kind: Invalid, Message: "request body is not valid UTF-8"}
	}
	s := strictScanner{data: data}
	s.value(0)
	if s.err != nil || names == nil {
		return s.err
	}
	for _, n := range s.top {
		if names[n] {
			continue
		}
		for want := range names {
			if strings.EqualFold(n, want) {
				return &Error{Kind: Invalid, Field: n, Message: fmt.Sprintf("unknown field %q; did you mean %q? Names are case-sensitive", n, want)}
			}
		}
	}
	return nil
}

// fieldNames returns the JSON names of the fields of the struct dst
// points to, or nil when dst is not a pointer to a struct.
func fieldNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	if v, ok := namesByType.Load(t); ok {
		return v.(map[string]bool)
	}
	names := map[string]bool{}
	for i := range t.Elem().NumField() {
		f := t.Elem().Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = true
	}
	namesByType.Store(t, names)
	return names
}

// namesByType caches fieldNames per type.
var namesByType sync.Map

// maxStrictDepth bounds the nesting checkStrict follows; deeper JSON is
// left to the decoder (which has its own limit).
const maxStrictDepth = 1000

// strictScanner walks one JSON value. On malformed input it stops with
// err nil; on a strictness violation it stops with err set.
type strictScanner struct {
	data []byte
	pos  int
	err  error
	bad  bool     // malformed: stop quietly
	top  []string // the names of the top-level object
}

func (s *strictScanner) stopped() bool { return s.err != nil || s.bad }

func (s *strictScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.pos++
		default:
			return
		}
	}
}

// value scans one value at s.pos; path names where it is, for messages.
func (s *strictScanner) value(depth int) {
	s.ws()
	if s.pos >= len(s.data) || depth > maxStrictDepth {
		s.bad = true
		return
	}
	switch s.data[s.pos] {
	case '{':
		s.object(depth)
	case '[':
		s.pos++
		s.ws()
		if s.pos < len(s.data) && s.data[s.pos] == ']' {
			s.pos++
			return
		}
		for !s.stopped() {
			s.value(depth + 1)
			s.ws()
			if s.stopped() || s.pos >= len(s.data) {
				s.bad = true
				return
			}
			if s.data[s.pos] == ']' {
				s.pos++
				return
			}
			if s.data[s.pos] != ',' {
				s.bad = true
				return
			}
			s.pos++
		}
	case '"':
		s.str()
	default:
		// A number, true, false or null: up to the next delimiter.
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return
			}
			s.pos++
		}
	}
}

// object scans an object, checking its names.
func (s *strictScanner) object(depth int) {
	s.pos++ // '{'
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return
	}
	var seen map[string]string // folded name → name as written
	for !s.stopped() {
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			s.bad = true
			return
		}
		name := s.str()
		if s.stopped() {
			return
		}
		folded := strings.ToLower(name)
		if prev, ok := seen[folded]; ok {
			msg := fmt.Sprintf("the member %q appears twice", name)
			if prev != name {
				msg = fmt.Sprintf("the members %q and %q differ only in case", prev, name)
			}
			s.err = &Error{Kind: Invalid, Field: prev, Message: msg + "; send each once, in its exact case"}
			return
		}
		if seen == nil {
			seen = map[string]string{}
		}
		seen[folded] = name
		if depth == 0 {
			s.top = append(s.top, name)
		}
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			s.bad = true
			return
		}
		s.pos++
		s.value(depth + 1)
		s.ws()
		if s.stopped() || s.pos >= len(s.data) {
			s.bad = true
			return
		}
		if s.data[s.pos] == '}' {
			s.pos++
			return
		}
		if s.data[s.pos] != ',' {
			s.bad = true
			return
		}
		s.pos++
	}
}

// str scans a string at s.pos and returns its contents as written
// (escapes of ASCII names decoded, enough to compare names), refusing an
// escaped surrogate that is not half of a pair.
func (s *strictScanner) str() string {
	s.pos++ // '"'
	var b strings.Builder
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return b.String()
		case c == '\\':
			if s.pos+1 >= len(s.data) {
				s.bad = true
				return ""
			}
			if s.data[s.pos+1] != 'u' {
				b.WriteByte(s.data[s.pos+1])
				s.pos += 2
				continue
			}
			r, ok := s.hex4(s.pos + 2)
			if !ok {
				s.bad = true
				return ""
			}
			s.pos += 6
			switch {
			case r >= 0xD800 && r < 0xDC00: // high half: a low half must follow
				lo, ok := rune(0), false
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					lo, ok = s.hex4(s.pos + 2)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					s.err = &Error{Kind: Invalid, Message: fmt.Sprintf("a string holds the lone surrogate \\u%04x, which is not a character", r)}
					return ""
				}
				s.pos += 6
				b.WriteRune(0x10000 + (r-0xD800)<<10 + (lo - 0xDC00))
			case r >= 0xDC00 && r <= 0xDFFF:
				s.err = &Error{Kind: Invalid, Message: fmt.Sprintf("a string holds the lone surrogate \\u%04x, which is not a character", r)}
				return ""
			default:
				b.WriteRune(r)
			}
		default:
			b.WriteByte(c)
			s.pos++
		}
	}
	s.bad = true
	return ""
}

// hex4 reads four hex digits at i.
func (s *strictScanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
