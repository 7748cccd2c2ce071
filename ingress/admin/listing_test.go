package admin

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

// listScan is the fake partitions' scan bound: far below the store, so
// pages stop early and the merge must respect every partition's frontier.
const listScan = 3

// List pages through the fake's records of partition p as the partition
// processor does: newest first below req.Before, at most listScan looked
// at, filtered by service.
func (f *fakeInvocations) List(ctx context.Context, p uint32, req *rpc.ListInvocations) (*rpc.InvocationList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var recs []*rpc.InvocationRecord
	for id, rec := range f.records {
		if invocation.PartitionFor(invocation.ID([]byte(id)).PartitionKey(), testPartitions) == p {
			recs = append(recs, rec)
		}
	}
	pos := func(rec *rpc.InvocationRecord) []byte {
		return rpc.ListPosition(rec.AcceptedAtUnixMs, rec.Invoke.InvocationId)
	}
	slices.SortFunc(recs, func(a, b *rpc.InvocationRecord) int { return bytes.Compare(pos(b), pos(a)) })
	out := &rpc.InvocationList{}
	for i, rec := range recs {
		if req.Before != nil && bytes.Compare(pos(rec), req.Before) >= 0 {
			continue
		}
		if out.Scanned == listScan || uint32(len(out.Records)) == req.Limit {
			out.Resume = pos(recs[i-1])
			return out, nil
		}
		out.Scanned++
		if req.Service == "" || rec.Invoke.Service == req.Service {
			out.Records = append(out.Records, rec)
		}
	}
	return out, nil
}

func TestListInvocationsMergesPartitionsNewestFirst(t *testing.T) {
	f := newFixture(t, nil)
	var all, odd []string // newest first
	for i := range 40 {
		id := invocation.Random()
		svc := fmt.Sprintf("svc%d", i%2)
		f.invocations.records[string(id.Bytes())] = &rpc.InvocationRecord{
			Invoke:           &rpc.Invoke{InvocationId: id.Bytes(), Service: svc, Handler: "h"},
			State:            rpc.InvocationRecord_PENDING,
			AcceptedAtUnixMs: int64(1_700_000_000_000 + i*7%40*1000), // shuffled creation times
		}
		all = append(all, id.String())
		if svc == "svc1" {
			odd = append(odd, id.String())
		}
	}
	byTime := func(ids []string) []string {
		slices.SortFunc(ids, func(a, b string) int {
			ia, _ := invocation.ParseID(a)
			ib, _ := invocation.ParseID(b)
			ra, rb := f.invocations.records[string(ia.Bytes())], f.invocations.records[string(ib.Bytes())]
			return bytes.Compare(rpc.ListPosition(rb.AcceptedAtUnixMs, ib.Bytes()), rpc.ListPosition(ra.AcceptedAtUnixMs, ia.Bytes()))
		})
		return ids
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"limit=5", byTime(all)},
		{"limit=1000", byTime(all)},
		{"service=svc1&limit=4", byTime(odd)},
	} {
		var got []string
		cursor := ""
		for range 100 {
			a := f.do(t, "GET", "/invocations?"+tc.query+"&cursor="+url.QueryEscape(cursor), "")
			if a.status != 200 {
				t.Fatalf("%s: %d %s", tc.query, a.status, a.body)
			}
			page := decode[InvocationList](t, a)
			for _, inv := range page.Invocations {
				got = append(got, inv.ID)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("%s: listed\n %v\nwant\n %v", tc.query, got, tc.want)
		}
	}
}

func TestListInvocationsErrors(t *testing.T) {
	f := newFixture(t, nil)
	wantError(t, f.do(t, "GET", "/invocations?status=stuck", ""), http.StatusBadRequest, "status")
	wantError(t, f.do(t, "GET", "/invocations?limit=0", ""), http.StatusBadRequest, "limit")
	wantError(t, f.do(t, "GET", "/invocations?cursor=abc", ""), http.StatusBadRequest, "cursor")
	wantError(t, f.do(t, "GET", "/invocations?createdAfter=yesterday", ""), http.StatusBadRequest, "createdAfter")
	f.invocations.err = rpc.ErrUnavailable
	wantError(t, f.do(t, "GET", "/invocations", ""), http.StatusServiceUnavailable, "partition")
}

func TestConsoleServedWithoutTokenButNoData(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Token = "s3cret" })
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/app.css"} {
		a := f.do(t, "GET", path, "")
		if a.status != 200 || len(a.body) == 0 {
			t.Fatalf("GET %s: %d", path, a.status)
		}
		if csp := a.header.Get("Content-Security-Policy"); csp == "" {
			t.Fatalf("GET %s: no Content-Security-Policy", path)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/ui"} {
		resp, err := client.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
			t.Fatalf("GET %s: %d to %q, want 302 to /ui/", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for _, path := range []string{"/invocations", "/cluster", "/services", "/metrics", "/ui/../cluster"} {
		wantError(t, f.do(t, "GET", path, ""), http.StatusUnauthorized, "admin token")
	}
	if a := f.do(t, "GET", "/invocations", "", "Authorization", "Bearer s3cret"); a.status != 200 {
		t.Fatalf("with token: %d %s", a.status, a.body)
	}
}

// GET /cluster?leaders=1 fills a partition led elsewhere from its leader's
// own view, forwarding the caller's token; a stale leader view is ignored.
func TestClusterFilledFromLeaders(t *testing.T) {
	depth := 7
	leader := newFixture(t, func(c *Config) { c.Token = "tok" })
	leader.cluster.partitions = []PartitionStatus{
		{ID: 1, Leader: 2, Term: 3, Replicas: []ReplicaStatus{{NodeID: 1, Match: 9, Lag: new(uint64(1))}, {NodeID: 2, Match: 10}}, OutboxDepth: &depth},
		{ID: 2, Leader: 2, Term: 8, Replicas: []ReplicaStatus{{NodeID: 2, Match: 4}}, OutboxDepth: &depth},
	}
	f := newFixture(t, func(c *Config) { c.Token = "tok" })
	f.cluster.nodes = []NodeStatus{{ID: 1, Alive: true}, {ID: 2, Alive: true, AdminAddr: strings.TrimPrefix(leader.url, "http://")}}
	f.cluster.partitions = []PartitionStatus{{ID: 1, Leader: 2, Term: 3}, {ID: 2, Leader: 2, Term: 9}}
	v := decode[ClusterView](t, f.do(t, "GET", "/cluster?leaders=1", "", "Authorization", "Bearer tok"))
	if p := v.Partitions[0]; len(p.Replicas) != 2 || p.OutboxDepth == nil || *p.OutboxDepth != 7 {
		t.Fatalf("partition 1 not filled from its leader: %+v", p)
	}
	if p := v.Partitions[1]; len(p.Replicas) != 0 || p.OutboxDepth != nil {
		t.Fatalf("partition 2 filled from a view of another term: %+v", p)
	}
	if v := decode[ClusterView](t, f.do(t, "GET", "/cluster", "", "Authorization", "Bearer tok")); len(v.Partitions[0].Replicas) != 0 {
		t.Fatalf("filled without ?leaders=1")
	}
}
