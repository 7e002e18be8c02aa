package api

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"html"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/stampede-lab/stampede"
	"github.com/stampede-lab/stampede/waitroom"
)

// pageSource is the waiting page: an html/template with one inline style
// and one inline script (allowed by a per-answer CSP nonce), no external
// assets but the room's logo. The server renders its text in the buyer's
// language and the room's template, escaped; the script reads the room and
// its strings from the page, joins anonymously (solving the room's proof
// of work first), keeps the ticket token in localStorage, polls the
// ticket, and never writes a token into the page.
//
//go:embed page.html
var pageSource string

// pageTemplate is pageSource parsed once.
var pageTemplate = template.Must(template.New("page.html").Parse(pageSource))

// Lang is a language the waiting page speaks.
type Lang string

// The waiting page's languages.
const (
	LangEnglish Lang = "en"
	LangKorean  Lang = "ko"
)

// pageStrings are the page's texts per language; the script gets the same
// map (as JSON) for what it writes. {n}, {a}, {b}, {time}, {title} and
// {s} are filled in by the script.
var pageStrings = map[Lang]map[string]string{
	LangEnglish: {
		"title":             "Waiting room",
		"waiting_heading":   "You are in line",
		"position_label":    "Your place in line",
		"position_prefix":   "No.",
		"position_suffix":   "",
		"ahead":             "{n} ahead of you",
		"ahead_none":        "You are next",
		"eta_label":         "Estimated wait",
		"eta_calculating":   "Calculating…",
		"eta_unknown":       "not known for now",
		"eta_under_minute":  "less than a minute",
		"eta_minutes":       "about {a}–{b} min",
		"eta_hours":         "about {a}–{b} h",
		"progress_label":    "Progress in line",
		"keep_open":         "Keep this page open — no need to refresh. Your place is kept even if you switch tabs.",
		"live_position":     "You are number {n} in line. Estimated wait: {eta}.",
		"admitted_heading":  "It's your turn!",
		"admitted_text":     "Your place is held until {time}. Please continue now.",
		"admitted_title":    "✅ Your turn — {title}",
		"waiting_title":     "(No. {n}) {title}",
		"done_button":       "I'm done — free my place",
		"leave_button":      "Leave the line",
		"released":          "You have left. Thank you!",
		"left":              "You left the line.",
		"expired":           "Your time ran out.",
		"rejoin":            "Join the line again",
		"notify_button":     "Alert me when it's my turn",
		"notify_on":         "We will alert you with a sound and a notification.",
		"notify_sound":      "We will alert you with a sound (notifications are blocked in this browser).",
		"notification_body": "It's your turn in {title}. Come back to continue.",
		"joining":           "Joining the line…",
		"pow":               "Checking your browser… this takes a few seconds.",
		"opens_heading":     "Opens soon",
		"opens_in":          "Opens in",
		"opens_at":          "Opens at {time}. You will join the line automatically.",
		"days":              "{n} d",
		"paused":            "Admission is paused for a moment. Your place is kept.",
		"closed":            "This sale has closed.",
		"between":           "This part of the sale has ended. The next one opens at {time}; your place in line is kept.",
		"sale_before":       "Admission starts at {time}. Your place in line is kept.",
		"invite_required":   "This sale is by invitation only. Please open the link in your invitation.",
		"invite_used":       "This invitation has already been used.",
		"invite_invalid":    "This invitation link is not valid or has expired.",
		"unknown_room":      "We can't find this waiting room. Please check the link you followed.",
		"error_retry":       "Connection problem — retrying…",
		"rate_limited":      "Too many attempts from your network — retrying in {s} s.",
		"error_fatal":       "Something went wrong. Please reload the page.",
	},
	LangKorean: {
		"title":             "대기실",
		"waiting_heading":   "접속 대기 중입니다",
		"position_label":    "대기 순번",
		"position_prefix":   "",
		"position_suffix":   "번",
		"ahead":             "내 앞에 {n}명",
		"ahead_none":        "다음 차례입니다",
		"eta_label":         "예상 대기 시간",
		"eta_calculating":   "계산 중…",
		"eta_unknown":       "지금은 알 수 없음",
		"eta_under_minute":  "1분 이내",
		"eta_minutes":       "약 {a}–{b}분",
		"eta_hours":         "약 {a}–{b}시간",
		"progress_label":    "대기 진행률",
		"keep_open":         "이 페이지를 닫지 말고 기다려 주세요. 새로고침하지 않아도 되며, 다른 탭으로 이동해도 순서는 유지됩니다.",
		"live_position":     "현재 대기 순번은 {n}번입니다. 예상 대기 시간은 {eta}입니다.",
		"admitted_heading":  "입장 차례입니다!",
		"admitted_text":     "{time}까지 자리가 유지됩니다. 지금 진행해 주세요.",
		"admitted_title":    "✅ 입장 차례 — {title}",
		"waiting_title":     "({n}번) {title}",
		"done_button":       "완료 · 자리 반납하기",
		"leave_button":      "대기 취소",
		"released":          "퇴장했습니다. 이용해 주셔서 감사합니다.",
		"left":              "대기열에서 나왔습니다.",
		"expired":           "입장 가능 시간이 지났습니다.",
		"rejoin":            "다시 줄 서기",
		"notify_button":     "차례가 되면 알림 받기",
		"notify_on":         "차례가 되면 소리와 알림으로 알려 드립니다.",
		"notify_sound":      "차례가 되면 소리로 알려 드립니다. (이 브라우저는 알림이 차단되어 있습니다)",
		"notification_body": "{title} 입장 차례입니다. 돌아와서 진행해 주세요.",
		"joining":           "대기열에 들어가는 중…",
		"pow":               "브라우저를 확인하는 중입니다… 몇 초 걸립니다.",
		"opens_heading":     "곧 오픈합니다",
		"opens_in":          "오픈까지",
		"opens_at":          "{time}에 오픈합니다. 오픈 시각에 자동으로 대기열에 들어갑니다.",
		"days":              "{n}일",
		"paused":            "입장이 잠시 멈췄습니다. 대기 순번은 그대로 유지됩니다.",
		"closed":            "판매가 종료되었습니다.",
		"between":           "이번 판매 구간이 끝났습니다. 다음 구간은 {time}에 열리며, 대기 순번은 그대로 유지됩니다.",
		"sale_before":       "{time}에 입장이 시작됩니다. 대기 순번은 그대로 유지됩니다.",
		"invite_required":   "초대받은 분만 참여할 수 있는 판매입니다. 초대장에 있는 링크로 접속해 주세요.",
		"invite_used":       "이미 사용된 초대입니다.",
		"invite_invalid":    "유효하지 않거나 만료된 초대 링크입니다.",
		"unknown_room":      "대기실을 찾을 수 없습니다. 접속하신 주소를 다시 확인해 주세요.",
		"error_retry":       "연결이 원활하지 않아 다시 시도하는 중입니다…",
		"rate_limited":      "요청이 너무 많습니다. {s}초 후 다시 시도합니다.",
		"error_fatal":       "문제가 발생했습니다. 페이지를 새로고침해 주세요.",
	},
}

// PageLang chooses the page's language: ?lang=ko or ?lang=en when given,
// otherwise Korean when the most preferred language of Accept-Language
// that is Korean or English is Korean (ko, ko-KR, ...), else English.
func PageLang(r *http.Request) Lang {
	switch r.URL.Query().Get("lang") {
	case "ko":
		return LangKorean
	case "en":
		return LangEnglish
	}
	best, bestQ := LangEnglish, -1.0
	for part := range strings.SplitSeq(r.Header.Get("Accept-Language"), ",") {
		tag, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		tag = strings.ToLower(strings.TrimSpace(tag))
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		var lang Lang
		switch {
		case tag == "ko" || strings.HasPrefix(tag, "ko-"):
			lang = LangKorean
		case tag == "en" || strings.HasPrefix(tag, "en-"):
			lang = LangEnglish
		default:
			continue
		}
		if q > bestQ && q > 0 {
			best, bestQ = lang, q
		}
	}
	return best
}

// pageData is what page.html renders.
type pageData struct {
	Lang    Lang
	S       map[string]string
	Room    string
	Title   string
	LogoURL string
	// Primary and Background are #rrggbb (validated) or empty.
	Primary, Background string
	// Text is the room template's paragraph in Lang.
	Text string
	// Missing says the room does not exist: the page says so and does
	// not join.
	Missing bool
	// OnAdmitAttr is the data-on-admit attribute, or empty. It is built
	// here because html/template takes any attribute named on* (even
	// data-on*) for an event handler and would write the path as a
	// quoted JavaScript string.
	OnAdmitAttr template.HTMLAttr
	Nonce       string
}

// renderPage writes the waiting page for room (with its configuration
// when known) in lang, with its Content-Security-Policy.
func (h *handler) renderPage(w http.ResponseWriter, r *http.Request, room string, cfg *waitroom.RoomConfig, status int) {
	lang := PageLang(r)
	var nonceRaw [16]byte
	rand.Read(nonceRaw[:])
	d := pageData{
		Lang: lang, S: pageStrings[lang], Room: room, Title: pageStrings[lang]["title"],
		Missing: cfg == nil && status == http.StatusNotFound,
		Nonce:   hex.EncodeToString(nonceRaw[:]), // hex: nothing to escape in the attribute
	}
	if h.cfg.OnAdmit != "" {
		// HandlerConfig.Validate allows no quotes, angle brackets or
		// spaces in it; escaped all the same.
		d.OnAdmitAttr = template.HTMLAttr(`data-on-admit="` + html.EscapeString(h.cfg.OnAdmit) + `"`)
	}
	imgSrc := "'none'"
	if cfg != nil {
		t := cfg.Template
		if t.Title != "" {
			d.Title = t.Title
		}
		d.Primary, d.Background = t.PrimaryColor, t.BackgroundColor
		d.Text = t.TextEN
		if lang == LangKorean && t.TextKO != "" || t.TextEN == "" {
			d.Text = t.TextKO
		}
		if t.LogoURL != "" && waitroom.ValidLogoURL(t.LogoURL) == nil {
			d.LogoURL = t.LogoURL
			imgSrc = waitroom.LogoOrigin(t.LogoURL)
		}
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		h.api.Fail(w, r, stampede.InternalErr(err))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'nonce-"+d.Nonce+"'; "+
		"connect-src 'self'; img-src "+imgSrc+"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Vary", "Accept-Language")
	hd.Set("Content-Language", string(lang))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(buf.Bytes())
	}
}

// page serves the waiting page of GET /rooms/{room}: 200 with the room's
// template, 404 with a page that tells buyers the room does not exist (and
// nothing about how to create one). When the store cannot be read the
// page is served plain; its script retries.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	room, err := roomParam(r)
	if err != nil {
		h.api.Fail(w, r, err)
		return
	}
	cfg, err := h.svc.RoomConfig(r.Context(), room)
	switch {
	case errors.Is(err, waitroom.ErrNoRoom):
		h.renderPage(w, r, room, nil, http.StatusNotFound)
	case err != nil:
		h.cfg.Logger.Warn("waitroom: reading the room for its page failed; serving it plain", "room", room, "err", err)
		h.renderPage(w, r, room, nil, http.StatusOK)
	default:
		h.renderPage(w, r, room, &cfg, http.StatusOK)
	}
}
