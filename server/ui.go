package server

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"

	"github.com/fencelock/fencelock/acl"
)

//go:embed ui
var uiFiles embed.FS

// uiHandler serves the dashboard: the static page under /ui/ (embedded, no
// external assets) and /ui/events, the node's recent events as JSON. The
// page reads everything else from the node's JSON API.
func (s *Server) uiHandler() http.Handler {
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/events", func(w http.ResponseWriter, r *http.Request) {
		if err := s.allow(r.Context(), acl.Admin, ""); err != nil { // the audit trail: for admins
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(s.Events())
	})
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	return mux
}
