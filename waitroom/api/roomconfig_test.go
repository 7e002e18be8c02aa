package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stampede-lab/stampede/waitroom"
)

// TestPutNeedsOnlyCapacityPatchMerges: PUT with capacity alone creates a
// room with the documented defaults for everything else; a PATCH of the
// template changes the members it names and keeps the others (RFC 7396:
// null removes one).
func TestPutNeedsOnlyCapacityPatchMerges(t *testing.T) {
	e := newEnv(t, miniBackend(t), true)
	room := "defaults-" + randomName()
	path := "/v1/rooms/" + room
	admin := "Bearer " + adminToken
	t.Cleanup(func() { _ = e.store.DeleteRoom(context.Background(), room) })

	e.must(t, http.StatusOK, req{method: "PUT", path: path, body: `{"capacity":2}`, auth: admin})
	want := waitroom.DefaultRoomConfig()
	want.Capacity = 2
	if cfg, err := e.store.Config(context.Background(), room); err != nil || !cfg.Equal(want) {
		t.Fatalf("PUT {capacity:2}: config = %+v, %v\nwant the defaults %+v", cfg, err, want)
	}

	full := `{"template":{"title":"Sale","logo_url":"https://example.com/l.png","primary_color":"#112233","text_en":"Hello"}}`
	e.must(t, http.StatusOK, req{method: "PATCH", path: path, body: full, auth: admin})
	e.must(t, http.StatusOK, req{method: "PATCH", path: path, body: `{"template":{"title":"New","text_en":null}}`, auth: admin})
	want.Template = waitroom.RoomTemplate{Title: "New", LogoURL: "https://example.com/l.png", PrimaryColor: "#112233"}
	if cfg, err := e.store.Config(context.Background(), room); err != nil || cfg.Template != want.Template {
		t.Fatalf("after PATCH {template:{title:New, text_en:null}}: template = %+v, %v\nwant %+v", cfg.Template, err, want.Template)
	}
	if a := e.do(t, req{method: "PATCH", path: path, body: `{"template":{"colour":"#000000"}}`, auth: admin}); a.status != 400 {
		t.Errorf("PATCH of an unknown template member = %d %s, want 400", a.status, a.raw)
	}
	if a := e.do(t, req{method: "PUT", path: path, body: `{"lease_seconds":60}`, auth: admin}); a.status != 400 || a.str("field") != "capacity" {
		t.Errorf("PUT without capacity = %d %s, want 400 naming capacity", a.status, a.raw)
	}
}
