package admin

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/raftgate/raftgate/rpc"
)

// The console's node table and its "remove" action, driven in headless
// Chromium against this package's handler over a fake node table (the
// end-to-end console test, test/console_test.go, runs real nodes).

// browserTab opens a headless Chromium tab, or skips without a browser
// (fails when CI is set), as test/console_test.go does.
func browserTab(t *testing.T) context.Context {
	t.Helper()
	browser := os.Getenv("RAFTGATE_BROWSER")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if browser != "" {
			break
		}
		browser, _ = exec.LookPath(name)
	}
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but no Chromium or Chrome was found")
		}
		t.Skip("no Chromium or Chrome found (set RAFTGATE_BROWSER); skipping the browser test because CI is unset")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	return ctx
}

func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// waitConsole polls a JavaScript condition, showing the page when it never
// holds.
func waitConsole(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !evalJS[bool](t, ctx, js) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the console to show %s; page:\n%s", what, evalJS[string](t, ctx, `document.body.innerText`))
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}

// nodeRow is the JavaScript expression of node id's row in the overview.
func nodeRow(id string) string { return `document.querySelector('#nodes tr[data-node="` + id + `"]')` }

func TestConsoleRemovesNodes(t *testing.T) {
	ctx := browserTab(t)
	const reason = "removing node 1 would leave 1 live voter of 3 in partition 1, fewer than a quorum"
	nodes := &fakeNodes{nodes: threeNodes(), refuse: map[uint64]string{1: reason}}
	f := newFixture(t, func(c *Config) { c.Nodes = nodes })
	f.cluster.nodes = []NodeStatus{{ID: 1, GossipAddr: "127.0.0.1:7946", Alive: true}, {ID: 2, GossipAddr: "127.0.0.1:7947", Alive: true}}

	browse(t, ctx, "open the overview", chromedp.Navigate(f.url+"/ui/#/overview"))
	waitConsole(t, ctx, "three nodes with their states and zones", `(() => {
		const rows = [...document.querySelectorAll("#nodes tbody tr")];
		const field = (r, f) => r.querySelector("[data-field=" + f + "]").textContent;
		return rows.length === 3 && rows.map(r => field(r, "state")).join() === "active,active,removed" &&
			rows.map(r => field(r, "zone")).join() === "a,b,–" && field(rows[2], "alive") === "–";
	})()`)
	// Only active nodes can be removed.
	if got := evalJS[[]string](t, ctx, `[...document.querySelectorAll("#nodes button[data-remove-node]")].map(b => b.dataset.removeNode)`); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("remove buttons on nodes %v, want 1 and 2", got)
	}

	// Kept: nothing is removed.
	browse(t, ctx, "ask to remove node 2, then keep it",
		chromedp.Click(chromedp.CSS(`button[data-remove-node="2"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-remove-node")),
		chromedp.Click(chromedp.CSS("#confirm-node-no")))
	// Refused: the reason is shown.
	browse(t, ctx, "remove node 1",
		chromedp.Click(chromedp.CSS(`button[data-remove-node="1"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-remove-node")),
		chromedp.Click(chromedp.CSS("#confirm-node-yes")))
	waitConsole(t, ctx, "the refusal's reason", `!document.querySelector("#error").hidden &&
		document.querySelector("#error").textContent.includes(`+jsQuote("node 1 was not removed: "+reason)+`)`)
	// Accepted: the node shows draining, and no longer offers removal.
	browse(t, ctx, "remove node 2",
		chromedp.Click(chromedp.CSS(`button[data-remove-node="2"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-remove-node")),
		chromedp.Click(chromedp.CSS("#confirm-node-yes")))
	waitConsole(t, ctx, "node 2 draining", nodeRow("2")+`.querySelector("[data-field=state]").textContent === "draining" &&
		!`+nodeRow("2")+`.querySelector("button")`)
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if !slices.Equal(nodes.removed, []string{"2 force=false"}) {
		t.Fatalf("removals started: %q, want node 2's only", nodes.removed)
	}
}

// TestConsoleNodesWithoutMembership: a node that does not serve GET /nodes
// (501) shows the nodes gossip knows, with no error.
func TestConsoleNodesWithoutMembership(t *testing.T) {
	ctx := browserTab(t)
	f := newFixture(t, nil)
	f.cluster.nodes = []NodeStatus{{ID: 1, IngressAddr: "127.0.0.1:8080", Alive: true}, {ID: 2}}
	browse(t, ctx, "open the overview", chromedp.Navigate(f.url+"/ui/#/overview"))
	waitConsole(t, ctx, "two nodes from gossip", `document.querySelectorAll("#nodes tbody tr").length === 2 &&
		document.querySelector("#nodes").textContent.includes("127.0.0.1:8080")`)
	if text := evalJS[string](t, ctx, nodeRow("2")+`.textContent`); !strings.Contains(text, "DOWN") || strings.Contains(text, "Remove") {
		t.Fatalf("node 2's row %q: want DOWN and no remove button", text)
	}
	// (The fixture serves no /metrics: the banner says so, of that only.)
	if banner := evalJS[string](t, ctx, `document.querySelector("#error").textContent`); strings.Contains(banner, "/nodes") {
		t.Fatalf("error banner %q", banner)
	}
}

func jsQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// TestConsoleShowsPlacement: the partitions table shows each partition's
// replicas with roles, preferred leader and move in flight from GET
// /placement, and the replication and pause above it.
func TestConsoleShowsPlacement(t *testing.T) {
	ctx := browserTab(t)
	pl := &fakePlacement{view: twoPartitions()}
	pl.view.Paused = true
	f := newFixture(t, func(c *Config) { c.Placement = pl })
	f.cluster.partitions = []PartitionStatus{{ID: 0, Leader: 1}, {ID: 1, Leader: 1}, {ID: 2}}

	browse(t, ctx, "open the overview", chromedp.Navigate(f.url+"/ui/#/overview"))
	row := func(id string) string { return `document.querySelector('#partitions tr[data-partition="` + id + `"]')` }
	field := func(id, f string) string { return row(id) + `.querySelector("[data-field=` + f + `]").textContent` }
	waitConsole(t, ctx, "partition 2's move", row("2")+` !== null && `+field("2", "move")+` === "3 → 4"`)
	for _, c := range [][2]string{
		{field("1", "roles"), "1: voter  2: voter  3: voter"},
		{field("1", "preferred"), "node 1"},
		{field("1", "move"), "–"},
		{field("2", "roles"), "2: voter  3: outgoing  1: voter  4: incoming"},
		{field("0", "roles"), "–"},
		{`document.querySelector("#placement-state").textContent`, "replication 3, rebalancing paused"},
	} {
		if got := evalJS[string](t, ctx, c[0]); got != c[1] {
			t.Errorf("%s = %q, want %q", c[0], got, c[1])
		}
	}
}

// TestConsolePlacementWithoutMembership: a node that does not serve GET
// /placement (501) shows the partitions without placement, and no error.
func TestConsolePlacementWithoutMembership(t *testing.T) {
	ctx := browserTab(t)
	f := newFixture(t, nil)
	f.cluster.partitions = []PartitionStatus{{ID: 1, Leader: 1}}
	browse(t, ctx, "open the overview", chromedp.Navigate(f.url+"/ui/#/overview"))
	waitConsole(t, ctx, "partition 1", `document.querySelector('#partitions tr[data-partition="1"]') !== null`)
	if got := evalJS[string](t, ctx, `document.querySelector('#partitions tr[data-partition="1"] [data-field=move]').textContent`); got != "–" {
		t.Fatalf("move %q, want –", got)
	}
	if hidden := evalJS[bool](t, ctx, `document.querySelector("#placement-state").hidden`); !hidden {
		t.Fatal("placement badge shown without placement")
	}
	if banner := evalJS[string](t, ctx, `document.querySelector("#error").textContent`); strings.Contains(banner, "placement") {
		t.Fatalf("error banner %q", banner)
	}
}

// partitionBacklogs answers each partition's backlog from a table.
type partitionBacklogs map[uint32]*rpc.ServiceBacklog

func (b partitionBacklogs) Backlog(_ context.Context, p uint32, _ string) (*rpc.ServiceBacklog, error) {
	if bl, ok := b[p]; ok {
		return bl, nil
	}
	return &rpc.ServiceBacklog{}, nil
}

// The service list shows each service's backlog summed over the
// partitions, and the oldest waiting age of the longest wait.
func TestConsoleShowsBacklog(t *testing.T) {
	ctx := browserTab(t)
	backlogs := partitionBacklogs{
		1: {InFlight: 2, WaitingForLimit: 5, OldestWaitingDueUnixMs: 1_000, AtUnixMs: 2_500},
		2: {InFlight: 1, WaitingForLimit: 1, WaitingForRetry: 3, Paused: 1, OldestWaitingDueUnixMs: 9_000, AtUnixMs: 9_100},
	}
	f := newFixture(t, func(c *Config) { c.Backlogs = backlogs })
	f.registry.services["Payments"] = &rpc.Service{Name: "Payments", Url: "http://127.0.0.1:9080", Limits: &rpc.Limits{Concurrency: 3}}
	browse(t, ctx, "open the services", chromedp.Navigate(f.url+"/ui/#/services"))
	waitConsole(t, ctx, "the backlog of Payments", `(() => {
		const cell = document.querySelector('#services td[data-backlog="Payments"]');
		return !!cell && cell.textContent === "3 in flight, 6 waiting for a limit, 3 for a retry, 1 paused; oldest waiting 1.5s";
	})()`)
}
