package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog/raftlogpb"
	"github.com/raftgate/raftgate/rpc"
)

// Regression tests for product bugs the robustness suite found; each was
// fixed and its test now guards the fix (see docs/robustness.md).

// TestDispatchRefusesMisroutedInvocation: a dispatch Append whose
// invocation id belongs to partition A but that is addressed to partition
// B is acknowledged by B's leader. The invocation then lives where no
// lookup finds it: the ingress computes A from the id, so output/attach
// answer 404 for an acknowledged invocation. A correct ingress never sends
// this, but a node whose --partitions differs from the cluster's does
// (TestPartitionCountMismatchRefused).
func TestDispatchRefusesMisroutedInvocation(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	id := invocation.Random()
	owner := invocation.PartitionFor(id.PartitionKey(), robustnessPartitions)
	wrong := owner%robustnessPartitions + 1
	req := &rpc.DispatchRequest{Partition: wrong, RequestId: invocation.NewRequestID(),
		Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: &rpc.Invoke{
			InvocationId: id.Bytes(), RequestId: invocation.NewRequestID(), Service: "Echo", Handler: "echo", Body: []byte(`"x"`)}}}}
	// Every node checks ownership before anything else (leadership
	// included), so every node refuses with INVALID; a transport error
	// proves nothing.
	for _, n := range c.nodes {
		resp, err := dispatchAnswer(rpc.NewDispatchClient(dialNode(t, n)), req)
		if err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		if code := resp.GetError().GetCode(); code != rpc.DispatchError_INVALID {
			t.Errorf("node %d answered an invocation %s addressed to partition %d, but its id belongs to partition %d, with %v, want INVALID: %v",
				n.id, id, wrong, owner, code, resp)
		}
	}
}

// dispatchAnswer sends req on a dispatch stream and returns the answer.
func dispatchAnswer(client rpc.DispatchClient, req *rpc.DispatchRequest) (*rpc.DispatchResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	req.CorrelationId = 1
	if err := s.Send(req); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	resp, err := s.Recv()
	if err != nil {
		return nil, fmt.Errorf("recv: %w", err)
	}
	_ = s.CloseSend()
	return resp, nil
}

// TestPartitionCountMismatchRefused restarts one node of a 4-partition
// cluster with --partitions 3. Nothing records the count chosen at
// bootstrap, so the node starts, and its ingress maps ids to partitions
// with the wrong count: invocations it acknowledges land on partitions
// that do not own them, and the other nodes' ingresses cannot find them.
// Correct behaviour: the node refuses to start (or uses the cluster's
// count).
func TestPartitionCountMismatchRefused(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	odd := c.nodes[2]
	c.terminate(odd, 20*time.Second)
	for i, a := range odd.extraArgs {
		if a == "--partitions" {
			odd.extraArgs[i+1] = fmt.Sprint(robustnessPartitions - 1)
		}
	}
	c.start(odd)
	if err := c.waitReadyOrExit(odd, 20*time.Second); err != nil {
		t.Logf("node refused the mismatched partition count (correct): %v", err)
		return
	}
	ctx := context.Background()
	misrouted := 0
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("mismatch-%d", i)
		r, err := do(ctx, http.MethodPost, odd.ingressURL()+"/Echo/echo/send", []byte(`"m"`), map[string]string{"idempotency-key": key})
		if err != nil || r.status != http.StatusAccepted {
			t.Fatalf("send via the mismatched node: %v %+v", err, r)
		}
		var sr sendResult
		json.Unmarshal(r.body, &sr)
		var out *response
		testutil.WaitFor(t, 10*time.Second, "an answer from node 1", func() bool {
			out, err = do(ctx, http.MethodGet, c.nodes[0].ingressURL()+"/restate/invocation/"+sr.InvocationID+"/output", nil, nil)
			return err == nil && out.status != http.StatusServiceUnavailable
		})
		if out.status == http.StatusNotFound {
			misrouted++
			t.Logf("acknowledged %s (key %s) via node %d: node 1 answers 404 %s", sr.InvocationID, key, odd.id, out.body)
		}
	}
	if misrouted > 0 {
		t.Errorf("%d of 20 invocations acknowledged by the node with --partitions %d are not found through node 1",
			misrouted, robustnessPartitions-1)
	}
}

// TestForgedRaftMessageDoesNotCrashNode sends one well-formed heartbeat,
// as if from the leader of partition 1 at its current term, claiming a
// commit index far beyond the follower's log. Without TLS nothing
// authenticates the sender, and etcd raft panics on a commit index past
// its last index ("tocommit(…) is out of range … Was the raft log
// corrupted, truncated, or lost?"): one unauthenticated gRPC message kills
// a node, and three kill the cluster. Mutual TLS (--tls-ca) closes the
// door to outsiders; the transport could also refuse such messages.
func TestForgedRaftMessageDoesNotCrashNode(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	v, err := c.view(c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var leader, term uint64
	for _, p := range v.Partitions {
		if p.ID == 1 {
			leader, term = p.Leader, p.Term
		}
	}
	victim := c.nodes[0]
	if leader == uint64(victim.id) {
		victim = c.nodes[1]
	}
	u := proto.Uint64
	m, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: u(leader), To: u(uint64(victim.id)), Term: u(term), Commit: u(1 << 40)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := raftlogpb.NewRaftClient(dialNode(t, victim)).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&raftlogpb.RaftBatch{From: leader, To: uint64(victim.id), Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: m}}})
	_, err = s.CloseAndRecv()
	t.Logf("forged heartbeat: %v", err)
	c.waitReady(victim, 5*time.Second) // fails the test if the node died
	if !victim.alive() {
		t.Fatalf("node %d died: %s", victim.id, panicLine(victim.logPath))
	}
}
