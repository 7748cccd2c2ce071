package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/rpc"
)

// A node that starts checks its log before it serves clients: every group
// must catch up with its leader's commit index (raftlog.Group.CatchUp). A
// node whose log is older than what it acknowledged (an emptied data dir,
// an old copy) never passes: raftlog stops it with ErrStaleLog. Until the
// check passes the ingress does not listen (listenNode bound its port to
// check it is free, and let it go): a client meets a refused connection,
// which tells it for sure that nothing was taken, where a connection
// accepted and then dropped as the node exits would leave it unsure. The
// admin API serves reads, which help to see why a node does not start
// serving, but answers writes and /readyz with 503 on connections it
// closes.

// logCheckRetry is the wait between two catch-up attempts of a group that
// has no leader yet or did not answer.
const logCheckRetry = 100 * time.Millisecond

// startLogCheck starts the check in a goroutine owned by the node. Once
// every group caught up, it serves the ingress on ingressAddr (over TLS
// with ingressTLS, when not nil) and closes
// n.logChecked; a failure to listen is sent on n.serveFailed.
// n.stopLogCheck ends it and waits for it.
func (n *Server) startLogCheck(ingressAddr string, ingressTLS *tls.Config) {
	ctx, cancel := context.WithCancel(context.Background())
	n.logChecked = make(chan struct{})
	n.serveFailed = make(chan error, 1)
	done := make(chan struct{})
	n.stopLogCheck = func() { cancel(); <-done }
	go func() {
		defer close(done)
		start := time.Now()
		if !n.waitActive(ctx) {
			return
		}
		for _, g := range n.localGroups() {
			if !n.catchUp(ctx, g) {
				if ctx.Err() != nil || !n.leftNode(g) {
					return
				}
				// Placed elsewhere meanwhile: not this node's to check. A
				// replica removed while this node was down never catches
				// up: the reconciler deletes it (followPlacement).
			}
		}
		ln, err := net.Listen("tcp", ingressAddr)
		if err != nil {
			n.serveFailed <- fmt.Errorf("--ingress-addr: %w", err)
			return
		}
		n.ingressHTTP = serveHTTP("ingress", ln, n.ingress, ingressTLS, n.log)
		n.log.Info().Dur("took", time.Since(start).Round(time.Millisecond)).
			Msg("log checked: every group caught up with its leader; serving clients")
		n.warnIfIngressOpen()
		close(n.logChecked)
	}()
}

// waitActive waits, on a joining node, until the record says it is active
// (a voter of every group): it serves once it is a full member.
func (n *Server) waitActive(ctx context.Context) bool {
	if !n.joined {
		return true
	}
	for {
		changed := n.cluster.Changed()
		if self, ok := n.cluster.State().Node(n.cfg.NodeID); ok && self.State == rpc.NodeState_NODE_STATE_ACTIVE {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// leftNode reports whether g, stopped, is no longer this node's replica:
// the group told it it was removed, or the reconciler deleted it.
func (n *Server) leftNode(g *raftlog.Group) bool {
	select {
	case <-g.Removed():
		return true
	default:
		return n.raft.Group(g.ID()) != g
	}
}

// serving reports whether the log check passed and the ingress serves.
func (n *Server) serving() bool {
	select {
	case <-n.logChecked:
		return true
	default:
		return false
	}
}

// catchUp retries g.CatchUp until it succeeds (true), or the group or the
// check stops (false).
func (n *Server) catchUp(ctx context.Context, g *raftlog.Group) bool {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.CatchUp(attempt)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, raftlog.ErrStopped) || ctx.Err() != nil:
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(logCheckRetry):
		}
	}
}

// gateUntilChecked answers requests with 503 until the log check passed,
// except those pass lets through.
func (n *Server) gateUntilChecked(next http.Handler, pass func(*http.Request) bool) http.Handler {
	body, _ := json.Marshal(map[string]any{
		"code":    http.StatusServiceUnavailable,
		"message": "this node is still checking its log against the cluster's leaders and serves nothing yet; nothing was done, retry (at another node) is safe",
		"source":  "admin",
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.serving() || pass(r) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Connection", "close")
		h.Set("Retry-After", "1")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(body)
	})
}

// adminReadsPass lets admin reads through the gate (they change nothing and
// help to see why a node does not start serving), but /readyz, which load
// balancers and scripts ask whether the node serves.
func adminReadsPass(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path != "/readyz"
}

// restoreCommand is the way back for a node whose log the cluster refuses:
// a copy of a running peer's data file (docs/operations.md, "Backup and
// restore"). It names a peer gossip shows alive, when there is one.
func (n *Server) restoreCommand() string {
	peer := "http://PEER_ADMIN_ADDR"
	if n.members != nil {
		for _, m := range n.members.Members() {
			if m.ID != n.cfg.NodeID && m.Alive && m.AdminAddr != "" {
				peer = "http://" + m.AdminAddr
				break
			}
		}
	}
	return fmt.Sprintf("stop this node, empty %s, then: raftgate backup --admin %s -o %s, and start it again",
		n.cfg.DataDir, peer, filepath.Join(n.cfg.DataDir, raftlog.StateFile))
}
