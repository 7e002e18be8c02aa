package waitroom

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// pageHTML is the waiting page: plain HTML with one inline script and one
// inline style, no external assets. It reads the room from its own path,
// joins with POST /v1/rooms/{room}/tickets, keeps the ticket token in
// sessionStorage, polls the ticket after poll_after_ms, shows the
// admission token once admitted, and leaves with DELETE.
//
//go:embed page.html
var pageHTML []byte

// pageCSP allows the page's own inline script and style (by hash) and
// requests to its own origin, nothing else.
var pageCSP = fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; "+
	"img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	inlineHash(pageHTML, "script"), inlineHash(pageHTML, "style"))

// inlineHash is the CSP source expression for the first inline <tag>
// element of page. It panics if there is none: the embedded page is broken.
func inlineHash(page []byte, tag string) string {
	s := string(page)
	_, rest, ok := strings.Cut(s, "<"+tag+">")
	body, _, ok2 := strings.Cut(rest, "</"+tag+">")
	if !ok || !ok2 {
		panic("waitroom: page.html has no inline <" + tag + ">")
	}
	sum := sha256.Sum256([]byte(body))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// page serves the waiting page of GET /rooms/{room}. The room name is not
// written into the page (the script reads it from the path), so nothing
// needs escaping on the server.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	if _, err := roomParam(r); err != nil {
		h.api.Fail(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", pageCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(pageHTML)
	}
}
