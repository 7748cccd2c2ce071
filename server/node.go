package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/raftgate/raftgate/cluster"
	"github.com/raftgate/raftgate/ingress"
	"github.com/raftgate/raftgate/ingress/admin"
	"github.com/raftgate/raftgate/ingress/dispatch"
	"github.com/raftgate/raftgate/internal/buildinfo"
	"github.com/raftgate/raftgate/leadership"
	"github.com/raftgate/raftgate/outbox"
	"github.com/raftgate/raftgate/raftlog"
	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// maxGRPCMessage bounds one gRPC message between nodes: an ingress body of
// up to --max-body-bytes travels inside one dispatch request and one Raft
// entry, plus framing.
func maxGRPCMessage(cfg Config) int {
	return int(cfg.MaxBodyBytes) + 4<<20
}

// Fixed HTTP/2 flow-control windows for node-to-node gRPC. Setting them
// turns off grpc-go's dynamic window (BDP estimation), which answers
// received data with ping frames: on the busy raft and dispatch streams
// between nodes on one network those are pure overhead. 1 MiB per stream
// and 4 MiB per connection keep a raft batch or a large body flowing
// without waiting for window updates.
const (
	grpcStreamWindow = 1 << 20
	grpcConnWindow   = 4 << 20
)

// Server is one raftgate node: every component, in start order. New binds
// its listeners, Start starts the rest, Close stops it.
type Server struct {
	cfg Config
	log zerolog.Logger
	// lns are bound by New; Start hands them to the servers.
	lns     nodeListeners
	raft    *raftlog.Node
	members *leadership.Membership
	grpc    *grpc.Server
	served  chan error // grpc.Serve's result, read by close

	registry   *registry.Registry
	cluster    *cluster.Cluster
	meta       *raftlog.Group
	parts      localPartitions // the partitions with a replica here
	registerer prometheus.Registerer
	groups     *groupMetrics

	// flowReports are the partitions' demand reports, on the metadata
	// leader (flowshares.go).
	flowReports flowReports

	dispatchServer *dispatch.Server
	dispatchClient *dispatch.Client
	ingress        *ingress.Handler
	ingressHTTP    *httpService
	adminHTTP      *httpService
	stopWatch      func()

	// scheduleRuns hands the keyed runs of schedules to their key's
	// partition through dispatchClient, once it exists.
	scheduleRuns scheduleDispatch

	// led lists the partitions this node leads, for the ingress's
	// placement of new invocations (--placement local).
	led localLeaders
	// logChecked is closed once the node's log was checked against the
	// leaders and the ingress serves (logcheck.go); serveFailed tells that
	// the ingress could not listen then; stopLogCheck ends the check.
	// ingressHTTP is set by the check, and read once it ended.
	logChecked   chan struct{}
	serveFailed  chan error
	stopLogCheck func()
	// stopTokenReload ends the SIGHUP watch of --ingress-tokens.
	stopTokenReload func()

	// joinMembers are the members a join answered with (membership.go);
	// appliedRecord is the index of the cluster record applyRecord last
	// followed; stopMembership ends the reconciler, which sends a reason
	// to stop the node on membershipFailed.
	joined           bool // started without --node-id: joined a running cluster
	dialOpts         []grpc.DialOption
	downSince        map[uint64]time.Time // reconciler only: when gossip last lost a node
	joinMembers      []*rpc.ClusterNode
	appliedRecord    uint64
	stopMembership   func()
	membershipFailed chan error

	// failed carries the first failure that stops the node (Err);
	// stopFailWatch ends the goroutine that watches for it.
	failed        chan error
	stopFailWatch func()

	closeOnce sync.Once
	closeErr  error
}

// nodeListeners are the node's listeners. They are bound before anything
// else starts, so that a port in use fails the start before the data dir is
// created or opened.
type nodeListeners struct {
	node, admin net.Listener
	// ingressAddr is the ingress address, checked free by binding it and
	// let go at once: the ingress listens only once the log check passed
	// (logcheck.go), and a client meets refused connections until then.
	ingressAddr string
	// gossip is nil once handed to leadership.Start, which owns it then.
	gossip *leadership.Listener
}

// listenNode binds the node-to-node, ingress, admin and gossip addresses;
// on error it closes what it bound and names the flag and the address.
func listenNode(cfg Config, logger zerolog.Logger) (l nodeListeners, err error) {
	var ingress net.Listener
	for _, b := range []struct {
		flag, addr string
		ln         *net.Listener
	}{
		{"node-addr", cfg.NodeAddr, &l.node},
		{"ingress-addr", cfg.IngressAddr, &ingress},
		{"admin-addr", cfg.AdminAddr, &l.admin},
	} {
		if *b.ln, err = net.Listen("tcp", b.addr); err != nil {
			l.close()
			return nodeListeners{}, fmt.Errorf("--%s: %w", b.flag, err)
		}
		if b.ln == &ingress {
			l.ingressAddr = ingress.Addr().String()
			ingress.Close()
		}
	}
	if l.gossip, err = leadership.Listen(cfg.GossipAddr, logger); err != nil {
		l.close()
		return nodeListeners{}, fmt.Errorf("--gossip-addr: %w", err)
	}
	return l, nil
}

// close closes every bound listener (a listener already closed by its
// server just answers an error, ignored here).
func (l nodeListeners) close() {
	for _, ln := range []net.Listener{l.node, l.admin} {
		if ln != nil {
			ln.Close()
		}
	}
	if l.gossip != nil {
		l.gossip.Close()
	}
}

// New checks cfg and binds the node's listeners, so that a port in use
// fails before the data dir is created or opened; it starts nothing else.
// Close lets the listeners go when Start is never called.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Server{cfg: cfg, log: cfg.Logger, failed: make(chan error, 1)}
	n.scheduleRuns.partitions = cfg.Partitions
	if cfg.Failpoint != nil {
		cfg.Failpoint.warn(n.log)
	}
	lns, err := listenNode(cfg, n.log)
	if err != nil {
		return nil, err
	}
	n.lns = lns
	return n, nil
}

// Start starts the components bottom-up: storage and Raft groups, gossip,
// the node's gRPC server (Raft transport + dispatch), the admin HTTP API,
// and the check of its log against the leaders, which starts the ingress
// HTTP API once it passes (logcheck.go; Serving). On error it closes what
// it started, listeners included. Call it once.
func (n *Server) Start() (err error) {
	cfg := n.cfg
	defer func() {
		if err != nil {
			n.closeAll()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := buildinfo.Read()
	if err := registerBuildInfo(reg, build); err != nil {
		return err
	}
	if err := registerDiskMetrics(reg, cfg.DataDir); err != nil {
		return err
	}

	serverTLS, clientTLS, err := nodeTLS(cfg)
	if err != nil {
		return err
	}
	ingressTLS, err := loadIngressTLS(cfg)
	if err != nil {
		return err
	}
	serverCreds, clientCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if serverTLS != nil {
		serverCreds, clientCreds = credentials.NewTLS(serverTLS), credentials.NewTLS(clientTLS)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(clientCreds),
		// Notice a peer that vanished without closing its connection.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 3 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxGRPCMessage(cfg)), grpc.MaxCallSendMsgSize(maxGRPCMessage(cfg))),
		grpc.WithInitialWindowSize(grpcStreamWindow),
		grpc.WithInitialConnWindowSize(grpcConnWindow),
	}
	n.grpc = grpc.NewServer(
		grpc.Creds(serverCreds),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 2 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 5 * time.Second, Timeout: 3 * time.Second}),
		grpc.MaxRecvMsgSize(maxGRPCMessage(cfg)),
		grpc.MaxSendMsgSize(maxGRPCMessage(cfg)),
		grpc.InitialWindowSize(grpcStreamWindow),
		grpc.InitialConnWindowSize(grpcConnWindow),
	)
	// The data dir's lock comes first: a join writes the identity file
	// before raftlog opens the dir.
	lock, err := raftlog.LockDataDir(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	fresh := isEmptyDataDir(cfg.DataDir)
	n.dialOpts, n.downSince = dialOpts, map[uint64]time.Time{}
	if err := n.prepareIdentity(dialOpts); err != nil {
		_ = lock.Close()
		return err
	}
	cfg = n.cfg // a joining node has its id now
	if fresh && len(cfg.InitialCluster) > 1 {
		// Said first: if the cluster ran before, the leaders refuse this
		// node in a few seconds, after warning about their heartbeats.
		n.log.Info().Str("data_dir", cfg.DataDir).Str("if_refused", n.restoreCommand()).
			Msg("empty data dir: joining as a new replica, which is right when the cluster is first started; a node of a running cluster that lost its data is refused, and is restored from a peer")
	}
	rcfg := raftlog.DefaultConfig()
	rcfg.NodeID = cfg.NodeID
	rcfg.DataDir = cfg.DataDir
	rcfg.DataDirLock = lock
	rcfg.Peers = n.initialPeers()
	rcfg.DialOptions = dialOpts
	rcfg.Logger = n.log
	if cfg.QuietRaft {
		rcfg.RaftLogLevel = zerolog.WarnLevel
	}
	rcfg.Registerer = reg
	if cfg.BalanceLeaders {
		rcfg.LeaderBalanceTicks = raftlog.DefaultLeaderBalanceTicks
	}
	rcfg.CheckpointInterval = cfg.CheckpointInterval
	rcfg.Knobs = cfg.Failpoint.knobs(n.log)
	if n.raft, err = raftlog.Open(rcfg); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err = pinPartitionCount(cfg.DataDir, n.raft, cfg.Partitions); err != nil {
		_ = n.raft.Close()
		return err
	}
	n.raft.RegisterGRPC(n.grpc)

	voters := slices.Sorted(maps.Keys(n.initialPeers()))
	lcfg := leadership.DefaultConfig()
	lcfg.Self = leadership.NodeInfo{ID: cfg.NodeID, IngressAddr: cfg.IngressAddr, AdminAddr: cfg.AdminAddr, NodeAddr: n.advertisedNodeAddr()}
	lcfg.BindAddr = cfg.GossipAddr
	lcfg.AdvertiseAddr = cfg.AdvertiseGossipAddr
	lcfg.Join = cfg.Join
	lcfg.SecretKey = cfg.GossipKey
	lcfg.Voters = voters
	lcfg.Logger = n.log
	lcfg.Listener, n.lns.gossip = n.lns.gossip, nil // Start owns it now
	if n.members, err = leadership.Start(lcfg); err != nil {
		return fmt.Errorf("gossip: %w", err)
	}

	// State machines first, then the leadership watch, then the groups: no
	// leadership event can reach a processor that does not exist yet.
	n.registry = registry.New(n.log)
	n.registerer = reg
	callbackAllow := callbackAllowList(cfg)
	n.groups = newGroupMetrics(n)
	if err := reg.Register(n.groups); err != nil {
		return err
	}
	n.stopWatch = n.raft.Watch(n.onLeadership)
	n.cluster = cluster.New(n.log)
	n.meta, err = n.addGroup(raftlog.MetaGroup, &cluster.Machine{Registry: n.registry, Cluster: n.cluster})
	if err != nil {
		return fmt.Errorf("metadata group: %w", err)
	}
	n.registry.Start(n.meta)
	n.cluster.Start(n.meta)
	// The partitions this node holds: those its state has, all of them at
	// a first node's first start, and those placed here since.
	record := n.cluster.State()
	for p := uint32(1); p <= cfg.Partitions; p++ {
		how := openStored
		switch {
		case n.raft.HasGroup(raftlog.GroupID(p)):
		case !n.joined && record.ID == nil:
			how = openBootstrap
		case placedOn(record, p, cfg.NodeID):
			how = openBlank
		default:
			continue
		}
		if err := n.openPartition(p, how); err != nil {
			return err
		}
	}

	// The backend serves this node's dispatch server and its own client's
	// attempts on partitions it leads; it fences partitions through the
	// client when the registry changes.
	local := &backend{parts: &n.parts, count: cfg.Partitions, hints: n.members}
	ccfg := dispatch.DefaultClientConfig()
	ccfg.Self = cfg.NodeID
	ccfg.Peers = n.initialPeers()
	ccfg.DialOptions = dialOpts
	ccfg.Resolver = n.members
	ccfg.Local = local
	ccfg.DefaultTimeout = cfg.RequestTimeout
	ccfg.Logger = n.log
	ccfg.Registerer = reg
	if n.dispatchClient, err = dispatch.NewClient(ccfg); err != nil {
		return err
	}
	n.scheduleRuns.client.Store(n.dispatchClient)
	local.writes = registry.Writer{Registry: n.registry, Fences: n.dispatchClient, Partitions: cfg.Partitions}

	scfg := dispatch.DefaultServerConfig()
	scfg.Logger = n.log
	scfg.Registerer = reg
	n.dispatchServer = dispatch.NewServer(local, scfg)
	n.dispatchServer.Register(n.grpc)
	membership := membershipService{n: n, dialOpts: dialOpts}
	rpc.RegisterMembershipServer(n.grpc, membership)
	rpc.RegisterFlowControlServer(n.grpc, flowService{n: n})
	n.served = make(chan error, 1)
	go func() {
		// Serve returns nil once stopped by close (ErrServerStopped if
		// close came first); anything else means the node no longer takes
		// Raft or dispatch traffic.
		err := n.grpc.Serve(n.lns.node)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		if err != nil {
			n.log.Error().Err(err).Msg("node gRPC server stopped serving")
		}
		n.served <- err
	}()

	icfg := ingress.DefaultConfig()
	icfg.Partitions = cfg.Partitions
	icfg.Dispatcher = n.dispatchClient
	icfg.Services = registry.IngressLookup{Registry: n.registry}
	icfg.Retention = cfg.Retention
	icfg.MaxBodyBytes = cfg.MaxBodyBytes
	icfg.RejectReusedIdempotencyKeys = cfg.RejectReusedIdempotencyKeys
	icfg.MaxConcurrent = cfg.MaxConcurrent
	icfg.BodyReadTimeout = cfg.BodyReadTimeout
	icfg.RequestTimeout = cfg.RequestTimeout
	icfg.CallbackAllow = callbackAllow
	icfg.Logger = n.log
	icfg.Registerer = reg
	if cfg.Placement == PlacementLocal {
		icfg.LocalPartitions = n.led.partitions
	}
	if icfg.Tokens, err = loadIngressTokens(cfg, n.log); err != nil {
		return fmt.Errorf("--ingress-tokens: %w", err)
	}
	if n.ingress, err = ingress.New(icfg); err != nil {
		return err
	}
	if cfg.IngressTokens != "" {
		n.stopTokenReload = n.reloadTokensOnHangup()
	}
	adminHandler, err := admin.New(admin.Config{
		Cluster:        clusterView{n: n},
		Nodes:          nodesView{n: n, svc: membership},
		Placement:      placementView{n: n, svc: membership},
		Invocations:    n.dispatchClient,
		Keys:           n.dispatchClient,
		Backlogs:       n.dispatchClient,
		Lifecycle:      n.dispatchClient,
		Schedules:      n.dispatchClient,
		Registry:       registryView{client: n.dispatchClient, registry: n.registry},
		Partitions:     cfg.Partitions,
		Token:          cfg.AdminToken,
		Metrics:        promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		EnablePprof:    cfg.Pprof,
		Build:          admin.BuildInfo(build),
		RetryInForce:   func(p *rpc.RetryPolicy) *rpc.RetryPolicy { return defaultRetry(cfg).For(p).Proto() },
		CallbackAllow:  callbackAllow,
		Backup:         n.raft.Backup,
		RequestTimeout: cfg.RequestTimeout,
		Logger:         n.log,
	})
	if err != nil {
		return err
	}
	n.startLogCheck(n.lns.ingressAddr, ingressTLS)
	n.adminHTTP = serveHTTP("admin", n.lns.admin, n.gateUntilChecked(adminHandler, adminReadsPass), nil, n.log)
	n.log.Info().Uint32("partitions", cfg.Partitions).Str("ingress", cfg.IngressAddr).Str("admin", cfg.AdminAddr).
		Str("node_addr", cfg.NodeAddr).Str("version", build.Version).Str("commit", build.Commit).
		Str("build_date", build.BuildDate).Str("go_version", build.GoVersion).Msg("raftgate node started")
	n.membershipFailed = make(chan error, 1)
	n.startMembership(dialOpts)
	n.watchFailures()
	return nil
}

// watchFailures starts the goroutine that tells Err the first failure
// that stops the node: the ingress could not listen once the log check
// passed, or a Raft group stopped (corrupt or stale log, failing Apply),
// after which this node can no longer serve it and should stop rather
// than limp.
func (n *Server) watchFailures() {
	done, ended := make(chan struct{}), make(chan struct{})
	n.stopFailWatch = func() { close(done); <-ended }
	go func() {
		defer close(ended)
		var err error
		select {
		case <-done:
			return
		case err = <-n.serveFailed:
		case err = <-n.membershipFailed:
		case err = <-n.raft.Failed():
			if errors.Is(err, raftlog.ErrStaleLog) {
				restore := n.restoreCommand()
				n.log.Error().Err(err).Str("restore", restore).
					Msg("stopping: this node's log is older than what the cluster has from it (an emptied data dir, an old copy, or a peer's copy taken too soon); restore it from a new copy of a peer")
				err = fmt.Errorf("%w; restore this node's data dir from a peer (docs/operations.md, \"Backup and restore\"): %s", err, restore)
			} else if errors.Is(err, raftlog.ErrNotAMember) {
				n.log.Error().Err(err).Msg("stopping: this node is not a member of the cluster its peers run: a node is not added by naming it in --initial-cluster; " +
					"start it with an empty data dir, --join and no --node-id (docs/operations.md, \"Adding, removing and replacing nodes\")")
			} else {
				n.log.Error().Err(err).Msg("stopping: a Raft group failed")
			}
		}
		n.failed <- err
	}()
}

// Err delivers the failure that stops the node, once: the caller should
// Close it then.
func (n *Server) Err() <-chan error { return n.failed }

// Serving is closed once the node checked its log against the leaders and
// its ingress serves clients. Call it after Start.
func (n *Server) Serving() <-chan struct{} { return n.logChecked }

// defaultRetry is the cluster's default delivery retry policy from the
// --retry-* flags.
func defaultRetry(cfg Config) outbox.Policy {
	p := outbox.DefaultPolicy()
	p.MaxAttempts = cfg.RetryMaxAttempts
	p.BackoffBase = cfg.RetryInitialBackoff
	p.BackoffMax = cfg.RetryMaxBackoff
	p.AttemptTimeout = cfg.RetryAttemptTimeout
	p.PauseOnMaxAttempts = cfg.RetryOnMaxAttempts == "pause"
	return p
}

// onLeadership fans a Raft leadership event out to gossip, to the set of
// partitions led here (placement) and to the group's state machine. It runs
// on raftlog goroutines and must not block.
func (n *Server) onLeadership(ev raftlog.LeaderEvent) {
	n.groups.onLeadership(ev)
	n.members.SetLocal(uint32(ev.Group), ev.Leader, ev.Term)
	if ev.Group == raftlog.MetaGroup {
		n.registry.OnLeadership(ev)
		n.cluster.OnLeadership(ev)
		return
	}
	n.led.set(uint32(ev.Group), ev.IsSelf)
	if proc := n.parts.get(uint32(ev.Group)); proc != nil {
		proc.OnLeadership(ev)
	}
}

// Close stops the node gracefully within cfg.ShutdownGrace: it stops
// taking new HTTP requests (health and new requests get 503, the listener
// stays open for cfg.DrainDelay so load balancers see it),
// hands leadership of every group it leads to a peer (which fails this
// node's pending requests with the retry-safe LOST_LEADERSHIP, so ingresses
// resend them to the new leader), lets in-flight HTTP requests finish, then
// closes everything and flushes storage.
func (n *Server) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.gracefulClose() })
	return n.closeErr
}

func (n *Server) gracefulClose() error {
	if n.ingress == nil {
		return n.close() // never started: only the listeners to let go
	}
	start := time.Now()
	grace := n.cfg.ShutdownGrace
	n.log.Info().Dur("grace", grace).Msg("shutting down")
	n.ingress.Drain()
	n.stopLogCheck() // a node still checking its log serves no client

	// A lone node has nobody to hand its groups to.
	if len(n.cfg.InitialCluster) > 1 {
		transferCtx, cancel := context.WithDeadline(context.Background(), start.Add(grace/2))
		n.logTransferFailures(n.raft.TransferAll(transferCtx))
		cancel()
	}

	var err error
	if n.ingressHTTP != nil {
		// Keep the ingress listening for the drain delay (the transfer
		// above runs in it): health and new requests get a retry-safe 503,
		// so a load balancer marks the node down and moves traffic, rather
		// than meeting refused connections. Then stop accepting.
		time.Sleep(time.Until(start.Add(n.cfg.DrainDelay)))

		// Requests still waiting for a result get a retry-safe 503 a
		// second before the grace ends (half of it at most), while the
		// server still drains: once its deadline passes it closes
		// connections, and they would see a drop. The second lets
		// http.Server notice the connections idle.
		stopWaiting := time.AfterFunc(time.Until(start.Add(grace-min(grace/2, time.Second))), n.ingress.StopWaiting)
		httpCtx, cancel := context.WithDeadline(context.Background(), start.Add(grace))
		err = n.ingressHTTP.Shutdown(httpCtx)
		cancel()
		stopWaiting.Stop()
		n.ingressHTTP = nil
	}
	err = errors.Join(err, n.close())
	n.log.Info().Dur("took", time.Since(start).Round(time.Millisecond)).Msg("stopped")
	return err
}

// logTransferFailures logs each group's failed hand-off on a line of its
// own (TransferAll joins them).
func (n *Server) logTransferFailures(err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, err := range errs {
		n.log.Warn().Err(err).Msg("leadership transfer incomplete; peers will elect after the election timeout")
	}
}

// closeAll closes whatever was started, at once and without handing
// leadership over (as a crash would, but flushing storage). Safe on a node
// that started only partly, and with shutdown: whichever runs first acts.
func (n *Server) closeAll() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

// close closes every component that was started, top-down.
func (n *Server) close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if n.stopFailWatch != nil {
		n.stopFailWatch()
	}
	if n.stopMembership != nil {
		n.stopMembership()
	}
	if n.stopTokenReload != nil {
		n.stopTokenReload()
	}
	if n.stopLogCheck != nil {
		n.stopLogCheck() // before reading ingressHTTP, which it sets
	}
	if n.ingressHTTP != nil {
		errs = append(errs, n.ingressHTTP.Shutdown(ctx))
	}
	if n.adminHTTP != nil {
		errs = append(errs, n.adminHTTP.Shutdown(ctx))
	}
	if n.dispatchServer != nil {
		n.dispatchServer.Close()
	}
	if n.dispatchClient != nil {
		errs = append(errs, n.dispatchClient.Close())
	}
	for _, p := range n.parts.all() {
		errs = append(errs, p.Close())
	}
	if n.registry != nil {
		n.registry.Close()
	}
	if n.grpc != nil {
		stopped := make(chan struct{})
		go func() { n.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			n.grpc.Stop()
		}
		if n.served != nil {
			if err := <-n.served; err != nil {
				errs = append(errs, fmt.Errorf("node gRPC: serve: %w", err))
			}
		}
	}
	if n.stopWatch != nil {
		n.stopWatch()
	}
	if n.members != nil {
		errs = append(errs, n.members.Close())
	}
	if n.raft != nil {
		errs = append(errs, n.raft.Close())
	}
	n.lns.close() // those no server took over
	return errors.Join(errs...)
}
