package admin

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/rpc"
)

func TestServiceKinds(t *testing.T) {
	f := newFixture(t, nil)
	a := f.do(t, "PUT", "/services/Counter", `{"url":"http://127.0.0.1:9080","kind":"object","handlers":["add","get"],"shared":["get"]}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT object: %d %s", a.status, a.body)
	}
	if v := decode[ServiceView](t, a); v.Kind != "object" || !slices.Equal(v.Shared, []string{"get"}) {
		t.Fatalf("answer %+v", v)
	}
	if got := f.registry.services["Counter"]; got.GetKind() != rpc.Service_OBJECT || !slices.Equal(got.GetShared(), []string{"get"}) {
		t.Fatalf("stored %v", got)
	}
	// No kind is a plain service, as every registration from before kinds.
	f.do(t, "PUT", "/services/Greeter", `{"url":"http://127.0.0.1:9080"}`)
	if v := decode[ServiceView](t, f.do(t, "GET", "/services/Greeter", "")); v.Kind != "service" || v.Shared != nil {
		t.Fatalf("plain service %+v", v)
	}
	for body, msg := range map[string]string{
		`{"url":"http://h","kind":"actor"}`:                                     `kind "actor" is unknown`,
		`{"url":"http://h","shared":["get"]}`:                                   "plain service has no shared handlers",
		`{"url":"http://h","kind":"object","handlers":["a"],"shared":["b"]}`:    "not one of its handlers",
		`{"url":"http://h","kind":"workflow","shared":["run"]}`:                 "run cannot be shared",
		`{"url":"http://h","kind":"workflow","handlers":["start"]}`:             "must include run",
		`{"url":"http://h","kind":"object","handlers":["a"],"shared":["a",""]}`: "not one of its handlers",
	} {
		wantError(t, f.do(t, "PUT", "/services/bad", body), http.StatusBadRequest, msg)
	}
}

type fakeKeys struct{ state *rpc.KeyState }

func (k fakeKeys) KeyStatus(ctx context.Context, p uint32, service, key string) (*rpc.KeyState, error) {
	if p != invocation.PartitionFor(invocation.KeyedPartitionKey(service, key), testPartitions) {
		return nil, rpc.ErrInvalid
	}
	return k.state, nil
}

func TestObjectKeyAndQueuedStatus(t *testing.T) {
	running := invocation.RandomKeyed("Counter", "a b")
	f := newFixture(t, func(c *Config) { c.Keys = fakeKeys{&rpc.KeyState{Running: running[:], Queued: 2}} })
	v := decode[ObjectKeyView](t, f.do(t, "GET", "/objects/Counter/a%20b", ""))
	if v.Running != running.String() || v.Queued != 2 || v.Key != "a b" || v.Service != "Counter" {
		t.Fatalf("key view %+v", v)
	}

	queued := invocation.RandomKeyed("Counter", "a b")
	f.invocations.records[string(queued[:])] = &rpc.InvocationRecord{
		Invoke: &rpc.Invoke{Service: "Counter", Handler: "add", Key: "a b", Exclusive: true},
		State:  rpc.InvocationRecord_QUEUED, QueuePosition: 1,
	}
	iv := decode[InvocationView](t, f.do(t, "GET", "/invocations/"+queued.String(), ""))
	if iv.Status != "queued" || iv.QueuePosition == nil || *iv.QueuePosition != 1 || iv.Key != "a b" {
		t.Fatalf("queued view %+v", iv)
	}
}
