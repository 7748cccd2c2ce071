package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/raftgate/raftgate/callback"
	"github.com/raftgate/raftgate/rpc"
)

// Cluster is the node's view of the cluster. Implemented by the node's
// wiring; called from HTTP handler goroutines, concurrently, so every method
// must be safe for concurrent use and must not block on the network.
type Cluster interface {
	// Nodes lists the known nodes (this one included), ordered by id.
	Nodes() []NodeStatus
	// Partitions lists the partitions (and, as id 0, the metadata group if
	// the wiring includes it), ordered by id.
	// withDigest also hashes each group's replicated state (StateDigest):
	// O(state size), so only on request.
	Partitions(withDigest bool) []PartitionStatus
	// Ready reports whether a leader is known for every partition.
	Ready() bool
}

// Invocations reaches an invocation's partition leader (through the
// dispatch client). Errors are rpc errors: rpc.ErrNotFound,
// *rpc.NotLeaderError, rpc.ErrUnavailable, ...; calls honour ctx.
type Invocations interface {
	// Status returns the stored record of the invocation.
	Status(ctx context.Context, partition uint32, id []byte) (*rpc.InvocationRecord, error)
	// Cancel completes the invocation with a cancelled result unless it has
	// already completed. It returns once the cancellation is applied.
	Cancel(ctx context.Context, partition uint32, id []byte) error
	// List returns one page of a partition's invocations, newest first
	// (see rpc.ListInvocations), read at the partition's leader.
	List(ctx context.Context, partition uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error)
}

// Keys reaches the partition leader of a key of a keyed service (through
// the dispatch client); errors as for Invocations.
type Keys interface {
	// KeyStatus returns the key's running invocation and queue length.
	KeyStatus(ctx context.Context, partition uint32, service, key string) (*rpc.KeyState, error)
}

// Backlogs reaches each partition's leader for a service's backlog
// (through the dispatch client); errors as for Invocations.
type Backlogs interface {
	// Backlog returns where service's deliveries are in partition.
	Backlog(ctx context.Context, partition uint32, service string) (*rpc.ServiceBacklog, error)
}

// Registry is the replicated service registry. PutService and DeleteService
// are forwarded to the metadata group's leader and return once applied;
// Lookup and List read this node's replica and must not block.
type Registry interface {
	PutService(ctx context.Context, svc *rpc.Service) error
	// DeleteService returns rpc.ErrNotFound for an unknown name.
	DeleteService(ctx context.Context, name string) error
	// CatchUp returns once this replica applied what the metadata group's
	// leader committed when it was called, so that Lookup and List then
	// see every change answered before; any error means the replica may
	// lag (the read is answered 503, never from a stale copy).
	CatchUp(ctx context.Context) error
	Lookup(name string) (*rpc.Service, bool)
	List() []*rpc.Service
}

// Config configures the admin API.
type Config struct {
	// Cluster, Invocations and Registry are required.
	Cluster     Cluster
	Invocations Invocations
	Registry    Registry
	// Partitions is the number of partitions P (ids 1..P), used to route an
	// invocation id to its partition. Required.
	Partitions uint32
	// Token, when set, is the bearer token every request except /healthz
	// and /readyz must carry.
	Token string
	// Metrics serves GET /metrics (typically promhttp.HandlerFor on the
	// node's registry). Nil answers 404.
	Metrics http.Handler
	// EnablePprof serves net/http/pprof under /debug/pprof/.
	EnablePprof bool
	// Backup, when set, serves GET /backup: it writes a consistent copy of
	// the node's data file to w, calling size with its length first
	// (raftlog.Node.Backup). Nil answers 404.
	Backup func(w io.Writer, size func(int64)) (int64, error)
	// Keys, when set, serves GET /objects/{object}/{key}. Nil answers 404.
	Keys Keys
	// Backlogs, when set, adds "backlog" to GET /services/{name}.
	Backlogs Backlogs
	// Lifecycle, when set, serves the invocation actions and bulk
	// operations (POST /invocations/{id}/{action}, POST
	// /invocations/bulk, GET /operations/{op}). Nil answers 404.
	Lifecycle Lifecycle
	// Nodes serves GET /nodes and DELETE /nodes/{id}. Nil answers 501
	// (a node without cluster membership).
	Nodes Nodes
	// Placement serves /placement and its changes. Nil answers 501 (a
	// node without cluster membership).
	Placement Placement
	// Schedules, when set, serves /schedules. Nil answers 404.
	Schedules Schedules
	// Build is this node's build, served by GET /version.
	Build BuildInfo
	// RetryInForce fills the unset fields of a service's registered retry
	// policy with the cluster's defaults, as the invoker does
	// (outbox.Policy.For); GET /services shows the result. Nil shows the
	// registered fields only.
	RetryInForce func(*rpc.RetryPolicy) *rpc.RetryPolicy
	// CallbackAllow is the allow-list a service's default callback URL is
	// checked against; the zero Allow refuses every one.
	CallbackAllow callback.Allow
	// RequestTimeout bounds each call into the cluster. Default 10s.
	RequestTimeout time.Duration
	// Now stamps service registrations (UpdatedAtUnixMs). Default time.Now.
	Now func() time.Time
	// Logger receives one line per failed request.
	Logger zerolog.Logger
}

// DefaultRequestTimeout is used when Config.RequestTimeout is zero.
const DefaultRequestTimeout = 10 * time.Second

// ErrInvalidConfig is returned (wrapped, naming the field) by New.
var ErrInvalidConfig = errors.New("invalid admin config")

// Validate checks the required fields.
func (c Config) Validate() error {
	switch {
	case c.Cluster == nil:
		return fmt.Errorf("%w: Cluster is required", ErrInvalidConfig)
	case c.Invocations == nil:
		return fmt.Errorf("%w: Invocations is required", ErrInvalidConfig)
	case c.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrInvalidConfig)
	case c.Partitions == 0:
		return fmt.Errorf("%w: Partitions must be at least 1", ErrInvalidConfig)
	case c.RequestTimeout < 0:
		return fmt.Errorf("%w: RequestTimeout must not be negative", ErrInvalidConfig)
	}
	return nil
}

// server holds the handlers' shared configuration; it is immutable after New.
type server struct {
	cfg Config
	log zerolog.Logger
	// peers asks other nodes' admin APIs (GET /cluster?leaders=1).
	peers *http.Client
}

// New returns the admin API as an http.Handler.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &server{cfg: cfg, log: cfg.Logger.With().Str("component", "admin").Logger(),
		peers: &http.Client{Timeout: peerTimeout}}

	mux := http.NewServeMux()
	mux.HandleFunc("/services", s.methods(route{get: s.listServices}))
	mux.HandleFunc("/services/{name}", s.methods(route{get: s.getService, put: s.putService, delete: s.deleteService}))
	mux.HandleFunc("/rules", s.methods(route{get: s.listRules}))
	mux.HandleFunc("/rules/{pattern}", s.methods(route{get: s.getRule, put: s.putRule, delete: s.deleteRule}))
	mux.HandleFunc("/cluster", s.methods(route{get: s.getCluster}))
	mux.HandleFunc("/invocations", s.methods(route{get: s.listInvocations}))
	mux.HandleFunc("/invocations/{id}", s.methods(route{get: s.getInvocation, delete: s.cancelInvocation}))
	if cfg.Lifecycle != nil {
		mux.HandleFunc("/invocations/bulk", s.methods(route{post: s.bulkInvocations}))
		mux.HandleFunc("/invocations/{id}/{action}", s.methods(route{post: s.invocationAction}))
		mux.HandleFunc("/operations/{op}", s.methods(route{get: s.getOperation}))
	}
	mux.HandleFunc("/nodes", s.methods(route{get: s.listNodes}))
	mux.HandleFunc("/nodes/{id}", s.methods(route{delete: s.removeNode}))
	mux.HandleFunc("/placement", s.methods(route{get: s.getPlacement}))
	mux.HandleFunc("/placement/replication", s.methods(route{put: s.setReplication}))
	mux.HandleFunc("/placement/pause", s.methods(route{post: s.pausePlacement}))
	mux.HandleFunc("/placement/resume", s.methods(route{post: s.resumePlacement}))
	mux.HandleFunc("/placement/partitions/{p}/move", s.methods(route{post: s.movePartition}))
	if cfg.Keys != nil {
		mux.HandleFunc("/objects/{object}/{key}", s.methods(route{get: s.getObjectKey}))
	}
	if cfg.Schedules != nil {
		mux.HandleFunc("/schedules", s.methods(route{get: s.listSchedules}))
		mux.HandleFunc("/schedules/{id}", s.methods(route{get: s.getSchedule, put: s.putSchedule, delete: s.deleteSchedule}))
		mux.HandleFunc("/schedules/{id}/{action}", s.scheduleAction)
	}
	mux.HandleFunc("/metrics", s.methods(route{get: s.metrics}))
	mux.HandleFunc("/version", s.methods(route{get: s.version}))
	mux.HandleFunc("/backup", s.methods(route{get: s.backup}))
	mux.HandleFunc("/healthz", s.methods(route{get: s.healthz}))
	mux.HandleFunc("/readyz", s.methods(route{get: s.readyz}))
	if cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/ui/", s.methods(route{get: uiHandler().ServeHTTP}))
	mux.HandleFunc("/ui", s.methods(route{get: redirectToConsole}))
	mux.HandleFunc("/{$}", s.methods(route{get: redirectToConsole}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s", r.URL.Path))
	})
	return s.authenticate(mux), nil
}

// route names the handler of each method a path supports.
type route struct {
	get, put, post, delete http.HandlerFunc
}

// methods dispatches by method and answers 405 with an Allow header (and a
// JSON body, unlike ServeMux's own 405) for the others. HEAD is served as
// GET.
func (s *server) methods(rt route) http.HandlerFunc {
	allow := ""
	add := func(h http.HandlerFunc, m string) {
		if h == nil {
			return
		}
		if allow != "" {
			allow += ", "
		}
		allow += m
	}
	add(rt.get, "GET, HEAD")
	add(rt.put, http.MethodPut)
	add(rt.post, http.MethodPost)
	add(rt.delete, http.MethodDelete)
	return func(w http.ResponseWriter, r *http.Request) {
		var h http.HandlerFunc
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			h = rt.get
		case http.MethodPut:
			h = rt.put
		case http.MethodPost:
			h = rt.post
		case http.MethodDelete:
			h = rt.delete
		}
		if h == nil {
			w.Header().Set("Allow", allow)
			s.writeError(w, r, http.StatusMethodNotAllowed,
				fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
			return
		}
		h(w, r)
	}
}

// callContext bounds a call into the cluster by RequestTimeout.
func (s *server) callContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Cluster.Ready() {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready: a partition has no known leader"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// backup streams a consistent copy of the node's data file (see
// docs/operations.md "Backup and restore"). The length is known before the
// first byte and sent as Content-Length, so a copy cut short shows as one.
func (s *server) backup(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Backup == nil {
		s.writeError(w, r, http.StatusNotFound, "backup is not enabled on this node")
		return
	}
	var dst io.Writer = w
	head := &headOnly{}
	if r.Method == http.MethodHead {
		// The length is all a HEAD needs: stop the copy at its first write
		// (bbolt does not wrap the writer's error, so head remembers it).
		dst = head
	}
	started := false
	n, err := s.cfg.Backup(dst, func(size int64) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", `attachment; filename="state.db"`)
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		started = true
	})
	switch {
	case head.stopped && started:
	case err == nil:
		s.log.Info().Int64("bytes", n).Msg("backup served")
	case !started:
		s.writeError(w, r, http.StatusServiceUnavailable, fmt.Sprintf("backup: %v", err))
	default:
		// The status is out: abort the response so that the client sees a
		// body shorter than its Content-Length, never a silently cut file.
		s.log.Warn().Err(err).Int64("bytes", n).Msg("backup cut short")
		panic(http.ErrAbortHandler)
	}
}

// headOnly ends the copy behind a HEAD /backup at its first write.
type headOnly struct{ stopped bool }

func (h *headOnly) Write([]byte) (int, error) {
	h.stopped = true
	return 0, errors.New("HEAD /backup: no body")
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Metrics == nil {
		s.writeError(w, r, http.StatusNotFound, "metrics are not enabled on this node")
		return
	}
	s.cfg.Metrics.ServeHTTP(w, r)
}
