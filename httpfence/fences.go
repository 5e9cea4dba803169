package httpfence

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// FenceInfo is the JSON body of the fence endpoints' answers.
type FenceInfo struct {
	Domain  string          `json:"domain"`
	Highest fencelock.Token `json:"highest"`
}

// FencesHandler serves f's fence endpoints, with the domain as the path
// (mount it with http.StripPrefix): POST /{domain} with a Fencing-Token
// raises the domain's highest token without writing (f.Check), GET /{domain}
// reads it (f.Highest). Both answer a FenceInfo.
func FencesHandler(f fencelock.Fence) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		domain := strings.TrimPrefix(r.URL.Path, "/")
		if err := fence.ValidateDomain(domain); err != nil {
			WriteError(w, err)
			return
		}
		switch r.Method {
		case http.MethodPost:
			tok, err := ParseToken(r.Header)
			if err == nil {
				err = f.Check(r.Context(), domain, tok)
			}
			if err != nil {
				WriteError(w, err)
				return
			}
		case http.MethodGet, http.MethodHead:
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			WriteError(w, fmt.Errorf("method %s: want GET or POST: %w", r.Method, fencelock.ErrInvalidArgument))
			return
		}
		highest, err := f.Highest(r.Context(), domain)
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(FenceInfo{Domain: domain, Highest: highest})
	})
}
