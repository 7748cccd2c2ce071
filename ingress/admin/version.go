package admin

import "net/http"

// BuildInfo says which build a node runs (GET /version).
type BuildInfo struct {
	Version string `json:"version"`
	// Commit is the VCS revision, with "-dirty" when the tree had local
	// changes; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// BuildDate is RFC 3339; empty when unknown.
	BuildDate string `json:"buildDate,omitempty"`
	GoVersion string `json:"goVersion"`
}

// version serves GET /version: this node's build, so that a rolling
// upgrade can be watched node by node (raftgate status).
func (s *server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Build)
}
