package api

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/pprof"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/server"
)

//go:embed ui
var uiFiles embed.FS

// uiHandler serves the dashboard: the static page under /ui/ (embedded, no
// external assets) and /ui/events, the node's recent events as JSON. The
// page reads everything else from the node's JSON API.
func uiHandler(s *server.Server) http.Handler {
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/events", func(w http.ResponseWriter, r *http.Request) {
		if !adminOnly(s, w, r) { // the audit trail
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(s.Events())
	})
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	return mux
}

// adminOnly answers a request of an HTTP admin-only surface that
// RequireAdmin refuses (401 or 403) and reports whether it may go on.
func adminOnly(s *server.Server, w http.ResponseWriter, r *http.Request) bool {
	err := s.RequireAdmin(r.Context(), r.RemoteAddr)
	switch {
	case err == nil:
		return true
	case errors.Is(err, fencelock.ErrPermissionDenied):
		http.Error(w, err.Error(), http.StatusForbidden)
	default:
		http.Error(w, err.Error(), http.StatusUnauthorized)
	}
	return false
}

// profiles serves Go's profiles under /debug/pprof/ to admins only.
func profiles(s *server.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if adminOnly(s, w, r) {
			mux.ServeHTTP(w, r)
		}
	})
}
