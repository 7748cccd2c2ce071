package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authenticate requires "Authorization: Bearer <Token>" on every request
// except the health probes, which orchestrators call without credentials,
// and the console's static files (isConsolePath), which hold no data.
// Comparing SHA-256 digests keeps the comparison constant-time whatever the
// lengths.
func (s *server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := sha256.Sum256([]byte(s.cfg.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || isConsolePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if !ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftgate-admin"`)
			s.writeError(w, r, http.StatusUnauthorized, "missing or wrong admin token: send Authorization: Bearer <token> (see --admin-token)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
