package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/api"
)

func TestPageLang(t *testing.T) {
	for _, tc := range []struct {
		accept, query string
		want          api.Lang
	}{
		{"", "", api.LangEnglish},
		{"ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7", "", api.LangKorean},
		{"ko", "", api.LangKorean},
		{"en-US,en;q=0.9,ko;q=0.8", "", api.LangEnglish},
		{"fr-FR, ko;q=0.5, en;q=0.4", "", api.LangKorean},
		{"de, ja", "", api.LangEnglish},
		{"kok", "", api.LangEnglish}, // Konkani is not Korean
		{"ko;q=0, en;q=0.1", "", api.LangEnglish},
		{"ko-KR", "en", api.LangEnglish},
		{"en", "ko", api.LangKorean},
	} {
		r := httptest.NewRequest("GET", "/rooms/r?lang="+tc.query, nil)
		if tc.accept != "" {
			r.Header.Set("Accept-Language", tc.accept)
		}
		if got := api.PageLang(r); got != tc.want {
			t.Errorf("Accept-Language %q, lang %q: %s, want %s", tc.accept, tc.query, got, tc.want)
		}
	}
}

// getPage fetches a page with an Accept-Language.
func getPage(t *testing.T, e *env, path, lang string) answer {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	if lang != "" {
		r.Header.Set("Accept-Language", lang)
	}
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, r)
	if err := e.api.Check(r, rec.Result(), rec.Body.Bytes()); err != nil {
		t.Errorf("apitest: %v", err)
	}
	return answer{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
}

func TestPageLanguagesAndCSP(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, `{"capacity":3}`)
	ko := getPage(t, e, "/rooms/"+room, "ko-KR,ko;q=0.9")
	en := getPage(t, e, "/rooms/"+room, "en-US")
	if ko.status != 200 || en.status != 200 {
		t.Fatalf("page = %d / %d", ko.status, en.status)
	}
	for _, want := range []string{`<html lang="ko">`, "대기 순번", "예상 대기 시간", "입장 차례입니다", "<title>대기실</title>"} {
		if !bytes.Contains(ko.raw, []byte(want)) {
			t.Errorf("Korean page lacks %q", want)
		}
	}
	for _, want := range []string{`<html lang="en">`, "Your place in line", "Estimated wait", "It&#39;s your turn", "<title>Waiting room</title>"} {
		if !bytes.Contains(en.raw, []byte(want)) {
			t.Errorf("English page lacks %q", want)
		}
	}
	if bytes.Contains(en.raw, []byte("대기 순번")) || en.header.Get("Content-Language") != "en" || ko.header.Get("Content-Language") != "ko" {
		t.Error("the English page has Korean text, or Content-Language is wrong")
	}
	if v := ko.header.Get("Vary"); !strings.Contains(v, "Accept-Language") {
		t.Errorf("Vary = %q", v)
	}
	for _, id := range []string{"position", "eta", "progress", "live-polite", "live-assertive", "s-waiting", "s-admitted", "leave", "done", "notify"} {
		if !bytes.Contains(ko.raw, []byte(`id="`+id+`"`)) {
			t.Errorf("page lacks id=%q", id)
		}
	}
	for _, want := range []string{`aria-live="polite"`, `aria-live="assertive"`, `role="progressbar"`} {
		if !bytes.Contains(ko.raw, []byte(want)) {
			t.Errorf("page lacks %s", want)
		}
	}
	// No user id to type, no token shown, nothing from another origin.
	for _, bad := range []string{`id="user"`, "admission-token", "innerHTML", "://"} {
		if bytes.Contains(ko.raw, []byte(bad)) {
			t.Errorf("page contains %q", bad)
		}
	}
	csp := ko.header.Get("Content-Security-Policy")
	nonce := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9+/]+)'`).FindStringSubmatch(csp)
	if nonce == nil || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "img-src 'none'") {
		t.Fatalf("CSP = %q", csp)
	}
	if !bytes.Contains(ko.raw, []byte(`<script nonce="`+nonce[1]+`">`)) || !bytes.Contains(ko.raw, []byte(`<style nonce="`+nonce[1]+`">`)) {
		t.Error("the inline script and style do not carry the CSP nonce")
	}
	if en.header.Get("Content-Security-Policy") == csp {
		t.Error("two answers share a nonce")
	}
}

func TestPageUnknownRoom(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	for lang, want := range map[string]string{"ko": "대기실을 찾을 수 없습니다", "en": "We can&#39;t find this waiting room"} {
		p := getPage(t, e, "/rooms/no-such-room", lang)
		if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: unknown room page = %d %s", lang, p.status, p.header.Get("Content-Type"))
		}
		if !bytes.Contains(p.raw, []byte(want)) || !bytes.Contains(p.raw, []byte(`data-state="unknown"`)) {
			t.Errorf("%s: unknown room page lacks %q", lang, want)
		}
		for _, bad := range []string{"PUT /v1", "admin", "does not exist; an"} {
			if bytes.Contains(p.raw, []byte(bad)) {
				t.Errorf("%s: the buyer's page mentions %q", lang, bad)
			}
		}
	}
	if a := e.do(t, req{method: "GET", path: "/rooms/bad.name"}); a.status != http.StatusBadRequest {
		t.Errorf("page of a bad room name = %d", a.status)
	}
}

func TestPageTemplateEscaped(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	xss := `<script>alert(1)</script>"><img src=x onerror=alert(2)>`
	room := e.newRoom(t, `{"capacity":3,"template":{"title":`+quote(xss+" 콘서트")+`,"logo_url":"https://cdn.example.com/logo.png?a=1&b=2",`+
		`"primary_color":"#E4007F","background_color":"#101820","text_ko":`+quote("안내\n"+xss)+`,"text_en":`+quote("Hello\n"+xss)+`}}`)
	for _, lang := range []string{"ko", "en"} {
		p := getPage(t, e, "/rooms/"+room, lang)
		if p.status != 200 {
			t.Fatalf("page = %d", p.status)
		}
		raw := string(p.raw)
		if strings.Count(raw, "<script") != 2 || strings.Contains(raw, "<img src=x") || strings.Contains(raw, "alert(1)</script>") {
			t.Errorf("%s: the template's markup was not escaped:\n%s", lang, raw[:min(len(raw), 3000)])
		}
		if !strings.Contains(raw, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the escaped title is missing", lang)
		}
		if !strings.Contains(raw, "--primary: #E4007F") || !strings.Contains(raw, "--bg: #101820") {
			t.Errorf("%s: colours not applied", lang)
		}
		if !strings.Contains(raw, `src="https://cdn.example.com/logo.png?a=1&amp;b=2"`) {
			t.Errorf("%s: logo missing", lang)
		}
		text := map[string]string{"ko": "안내", "en": "Hello"}[lang]
		if !strings.Contains(raw, `class="text">`+text) {
			t.Errorf("%s: template text missing", lang)
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src https://cdn.example.com;") {
			t.Errorf("%s: CSP = %q, want the logo's origin only", lang, csp)
		}
	}
	a := e.must(t, http.StatusOK, req{method: "PUT", path: "/v1/rooms/" + room, body: roomBody(t, `{"template":{"title":"T"}}`), auth: "Bearer " + adminToken})
	if tm, _ := a.json["template"].(map[string]any); tm["title"] != "T" {
		t.Errorf("PUT answer template = %v", a.json["template"])
	}
}

func TestRoomTemplateValidate(t *testing.T) {
	e := newEnv(t, miniBackend(t), false)
	room := e.newRoom(t, `{"capacity":3}`)
	for field, tmpl := range map[string]string{
		"template.primary_color":    `{"primary_color":"red"}`,
		"template.background_color": `{"background_color":"#12345"}`,
		"template.logo_url":         `{"logo_url":"javascript:alert(1)"}`,
		"template.title":            `{"title":"a\u0000b"}`,
		"template.text_en":          `{"text_en":"` + strings.Repeat("x", 2001) + `"}`,
	} {
		a := e.do(t, req{method: "PUT", path: "/v1/rooms/" + room, body: roomBody(t, `{"template":`+tmpl+`}`), auth: "Bearer " + adminToken})
		if a.status != http.StatusBadRequest || a.str("field") != field {
			t.Errorf("template %s = %d %s, want 400 naming %s", tmpl, a.status, a.raw, field)
		}
	}
	for _, u := range []string{"http://example.com/x.png", "https://user:pw@example.com/x.png", "//example.com/x.png", "https://ex ample.com/"} {
		if err := (waitroom.RoomTemplate{LogoURL: u}).Validate(); err == nil {
			t.Errorf("logo %q accepted", u)
		}
	}
	for _, u := range []string{"https://example.com/x.png", "http://127.0.0.1:8080/logo.svg", "http://localhost/x.png", "http://[::1]/x.png"} {
		if err := (waitroom.RoomTemplate{LogoURL: u}).Validate(); err != nil {
			t.Errorf("logo %q refused: %v", u, err)
		}
	}
}
