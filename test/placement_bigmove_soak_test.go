//go:build soak

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftgate/raftgate/internal/testutil"
)

// bigMoveView is the part of GET /placement this test reads.
type bigMoveView struct {
	Partitions []bigMovePartition `json:"partitions"`
}

type bigMovePartition struct {
	ID       uint32 `json:"id"`
	Leader   uint64 `json:"leader"`
	Replicas []struct {
		Node uint64 `json:"node"`
		Role string `json:"role"`
	} `json:"replicas"`
	Move *struct{} `json:"move"`
}

// holds says whether node id has a replica of p in role ("" for any).
func (p bigMovePartition) holds(id uint64, role string) bool {
	for _, r := range p.Replicas {
		if r.Node == id && (role == "" || r.Role == role) {
			return true
		}
	}
	return false
}

// TestPlacementBigMove moves a replica of a partition holding hundreds of
// MB of retained results (RAFTGATE_BIGMOVE_MB, default 300, measured as
// its leader's state.db) to the one node without it, on four nodes with
// R = 3 and two partitions, while clients send small invocations to the
// other partition. The receiver is killed with kill -9 once its snapshot
// spool holds a partial transfer and restarted; the move then finishes.
// It checks that the receiver's spool is empty after the interrupted
// transfer (at restart) and after the install, that the sender's state.db
// grows by less than half during the move (snapshots stream from a read
// transaction, no copy of the file), and that no accept of the other
// partition failed; it logs the p99 of those accepts before and during the
// move (docs/benchmarks.md, "Membership and placement"):
//
//	go test -tags soak ./test -run TestPlacementBigMove -v -timeout 10m
func TestPlacementBigMove(t *testing.T) {
	targetMB := 300
	if s := os.Getenv("RAFTGATE_BIGMOVE_MB"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("RAFTGATE_BIGMOVE_MB: %v", err)
		}
		targetMB = v
	}
	c := startCluster(t, clusterOpts{nodes: 4, partitions: 2})
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(echo.Close)
	c.registerService(c.nodes[0], "Echo", echo.URL)
	admin := c.nodes[0]

	var view bigMoveView
	read := func() bool {
		r, err := do(context.Background(), http.MethodGet, admin.adminURL()+"/placement", nil, nil)
		if err != nil || r.status != http.StatusOK {
			return false
		}
		view = bigMoveView{}
		return json.Unmarshal(r.body, &view) == nil
	}
	settled := func() bool {
		if !read() || len(view.Partitions) != 2 {
			return false
		}
		for _, p := range view.Partitions {
			if p.Move != nil || len(p.Replicas) != 3 || p.Leader == 0 {
				return false
			}
		}
		return view.Partitions[0].Leader != view.Partitions[1].Leader
	}
	testutil.WaitFor(t, 90*time.Second, "two partitions on three voters each, led by two nodes", settled)
	r, err := do(context.Background(), http.MethodPost, admin.adminURL()+"/placement/pause", nil, nil)
	if err != nil || r.status/100 != 2 {
		t.Fatalf("pause placement: %v %v", r, err)
	}
	byID := func(id uint64) *node {
		return c.nodes[slices.IndexFunc(c.nodes, func(n *node) bool { return uint64(n.id) == id })]
	}
	// The partition to move is one whose new node does not lead the
	// other, so that killing the receiver leaves the probe's ingress up.
	big, small := view.Partitions[0], view.Partitions[1]
	if !big.holds(small.Leader, "") {
		big, small = small, big
	}
	sender, smallLeader := byID(big.Leader), byID(small.Leader)
	var from, to uint64
	for _, n := range c.nodes {
		switch {
		case !big.holds(uint64(n.id), ""):
			to = uint64(n.id)
		case uint64(n.id) != big.Leader && from == 0:
			from = uint64(n.id)
		}
	}
	receiver := byID(to)
	if smallLeader == receiver {
		t.Logf("node %d leads partition %d and lacks partition %d, and the other way round: the probe's ingress is down while the receiver restarts, its errors are not counted",
			smallLeader.id, small.ID, big.ID)
	}
	t.Logf("partition %d (led by node %d) moves from node %d to node %d; partition %d led by node %d takes the probe",
		big.ID, big.Leader, from, to, small.ID, small.Leader)

	// Fill: 1 MiB calls through the big partition's leader, whose
	// --placement local puts them in the partition it leads.
	stateSize := func(n *node) int64 {
		fi, err := os.Stat(filepath.Join(n.dataDir, "state.db"))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	body, _ := json.Marshal(strings.Repeat("x", 1<<20))
	var wg sync.WaitGroup
	var fillErr error
	var fillMu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for stateSize(sender) < int64(targetMB)<<20 {
				r, err := do(context.Background(), http.MethodPost, sender.ingressURL()+"/Echo/echo", body, nil)
				if err == nil && r.status != http.StatusOK {
					err = fmt.Errorf("status %d: %.200s", r.status, r.body)
				}
				if err != nil {
					fillMu.Lock()
					fillErr = err
					fillMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if fillErr != nil {
		t.Fatalf("filling partition %d: %v", big.ID, fillErr)
	}
	t.Logf("sender's state.db: %d MB", stateSize(sender)>>20)

	// probe sends small invocations to the other partition until stop is
	// closed and returns their latencies and errors.
	var samples atomic.Int64
	probe := func(stop <-chan struct{}) (lat []time.Duration, errs []error) {
		var mu sync.Mutex
		var pw sync.WaitGroup
		for range 4 {
			pw.Add(1)
			go func() {
				defer pw.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					r, err := do(context.Background(), http.MethodPost, smallLeader.ingressURL()+"/Echo/echo/send", []byte(`"probe"`), nil)
					if err == nil && r.status/100 != 2 {
						err = fmt.Errorf("status %d: %.200s", r.status, r.body)
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						lat = append(lat, time.Since(start))
						samples.Add(1)
					}
					mu.Unlock()
				}
			}()
		}
		pw.Wait()
		return lat, errs
	}
	p99 := func(lat []time.Duration) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}

	// Before: the probe alone, for 2,000 accepts.
	stop := make(chan struct{})
	var before []time.Duration
	var beforeErrs []error
	done := make(chan struct{})
	go func() { before, beforeErrs = probe(stop); close(done) }()
	testutil.WaitFor(t, time.Minute, "2,000 accepts before the move", func() bool { return samples.Load() >= 2000 })
	close(stop)
	<-done

	// During: the move, with the receiver killed mid-transfer.
	sizeBefore := stateSize(sender)
	stop = make(chan struct{})
	var during []time.Duration
	var duringErrs []error
	done = make(chan struct{})
	go func() { during, duringErrs = probe(stop); close(done) }()
	moveBody, _ := json.Marshal(map[string]uint64{"from": from, "to": to})
	r, err = do(context.Background(), http.MethodPost, fmt.Sprintf("%s/placement/partitions/%d/move", admin.adminURL(), big.ID), moveBody, nil)
	if err != nil || r.status/100 != 2 {
		t.Fatalf("move: %v %v", r, err)
	}
	maxSize := sizeBefore
	spool := filepath.Join(receiver.dataDir, "snapshots")
	// spooled: the receiver's spool files and their total size.
	spooled := func() (names []string, size int64) {
		entries, _ := os.ReadDir(spool)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				names, size = append(names, e.Name()), size+fi.Size()
			}
		}
		return names, size
	}
	var partial []string
	testutil.WaitFor(t, 3*time.Minute, "a partial snapshot in the receiver's spool", func() bool {
		maxSize = max(maxSize, stateSize(sender))
		names, size := spooled()
		partial = names
		return size > sizeBefore/10
	})
	c.kill(receiver)
	t.Logf("receiver killed with %v spooled", partial)
	c.restart(receiver)
	if names, _ := spooled(); slices.ContainsFunc(partial, func(n string) bool { return slices.Contains(names, n) }) {
		t.Errorf("receiver's spool still holds %v after a restart: the interrupted transfer was not cleaned up", names)
	}
	testutil.WaitFor(t, 4*time.Minute, "the move finished", func() bool {
		maxSize = max(maxSize, stateSize(sender))
		if !read() {
			return false
		}
		p := view.Partitions[slices.IndexFunc(view.Partitions, func(p bigMovePartition) bool { return p.ID == big.ID })]
		return p.Move == nil && p.holds(to, "voter")
	})
	close(stop)
	<-done

	testutil.WaitFor(t, 30*time.Second, "the receiver's spool empty after the install", func() bool {
		entries, err := os.ReadDir(spool)
		return err == nil && len(entries) == 0
	})
	t.Logf("accepts of partition %d: before the move %d, p99 %v; during it %d, p99 %v",
		small.ID, len(before), p99(before), len(during), p99(during))
	t.Logf("sender's state.db: %d MB before the move, at most %d MB during it (%+.1f%%)",
		sizeBefore>>20, maxSize>>20, float64(maxSize-sizeBefore)*100/float64(sizeBefore))
	if errs := append(beforeErrs, duringErrs...); len(errs) > 0 && smallLeader != receiver {
		t.Errorf("%d accepts of the unmoved partition failed, first: %v", len(errs), errs[0])
	}
	if maxSize-sizeBefore > sizeBefore/2 {
		t.Errorf("sender's state.db grew from %d to %d MB during the move", sizeBefore>>20, maxSize>>20)
	}
}
