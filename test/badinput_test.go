package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/internal/testutil"
	"github.com/raftgate/raftgate/invocation"
	"github.com/raftgate/raftgate/raftlog/raftlogpb"
	"github.com/raftgate/raftgate/rpc"
)

// TestBadInputOnNodeAndGossipPorts throws garbage at a live node while
// clients use the cluster: random bytes, truncated and oversize HTTP/2
// frames and gRPC messages at the node (gRPC) port, well-formed gRPC
// carrying undecodable or nonsensical Raft and dispatch payloads, and
// random, truncated and oversize packets at the gossip port (TCP and UDP).
// Afterwards every node must still run and serve, and nothing acknowledged
// may be lost.
func TestBadInputOnNodeAndGossipPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	seed := robustnessSeed(t)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	c := startCluster(t, clusterOpts{nodes: 3, partitions: robustnessPartitions})
	svc := newRecorderTagging(t, true)
	c.registerService(c.nodes[0], "Echo", svc.srv.URL)

	rec := newRecording()
	tr := &traffic{c: c, service: "Echo", rec: rec, seed: seed, attemptTimeout: 4 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	wait := tr.run(ctx, 4)
	defer func() { stop(); wait() }()
	acked := func() int { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.acked) }
	testutil.WaitFor(t, 20*time.Second, "first acknowledgements", func() bool { return acked() >= 20 })

	victim := c.nodes[0]
	garbageTCP(t, victim.nodeAddr, rng, true)
	garbageRaft(t, victim, rng)
	for _, n := range c.nodes { // the leaders of the partitions see them too
		garbageDispatch(t, n, rng)
	}
	garbageTCP(t, victim.gossipAddr, rng, false)
	garbageUDP(t, victim.gossipAddr, rng)

	before := acked()
	testutil.WaitFor(t, 20*time.Second, "acknowledgements after the garbage", func() bool { return acked() >= before+30 })
	stop()
	wait()
	for _, n := range c.nodes {
		if !n.alive() {
			t.Fatalf("node %d died from bad input:\n%s", n.id, tail(n.logPath, 40))
		}
		c.waitReady(n, 10*time.Second)
	}
	if _, err := c.waitConverged(30 * time.Second); err != nil {
		t.Error(err)
	}
	r := row{failpoint: "bad-input", v: validate(c, rec, svc, "Echo")}
	report(t, "bad-input", r)
}

// http2Preface opens an HTTP/2 connection (what gRPC expects first).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameHeader is an HTTP/2 frame header claiming length bytes of payload.
func frameHeader(length uint32, typ, flags byte, stream uint32) []byte {
	h := make([]byte, 9)
	h[0], h[1], h[2] = byte(length>>16), byte(length>>8), byte(length)
	h[3], h[4] = typ, flags
	h[5], h[6], h[7], h[8] = byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream)
	return h
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// garbageTCP writes malformed streams to addr, one connection each, and
// reads whatever comes back for a moment before closing.
func garbageTCP(t *testing.T, addr string, rng *rand.Rand, http2 bool) {
	payloads := [][]byte{
		randomBytes(rng, 1024),
		randomBytes(rng, 1<<20),
		{0, 0, 0, 0, 1}, // a length prefix and nothing after it
	}
	if http2 {
		preface := []byte(http2Preface)
		settings := append(append([]byte{}, preface...), frameHeader(0, 0x4, 0, 0)...)
		payloads = append(payloads,
			preface,
			append(append([]byte{}, preface...), frameHeader(1<<23, 0x0, 0, 1)[:5]...),                                   // truncated frame header
			append(append(append([]byte{}, settings...), frameHeader(1<<24-1, 0x1, 0x4, 1)...), randomBytes(rng, 64)...), // oversize HEADERS, truncated
			append(append(append([]byte{}, settings...), frameHeader(200, 0x1, 0x4, 1)...), randomBytes(rng, 200)...),    // garbage HPACK
			append(append(append([]byte{}, settings...), frameHeader(64, 0x0, 0, 3)...), randomBytes(rng, 64)...),        // DATA on an unopened stream
		)
	} else {
		// memberlist's stream messages start with a type byte; give it each
		// type followed by garbage.
		for typ := 0; typ < 16; typ++ {
			payloads = append(payloads, append([]byte{byte(typ)}, randomBytes(rng, 256)...))
		}
	}
	for i, p := range payloads {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("garbage %d to %s: dial: %v", i, addr, err)
		}
		conn.SetDeadline(time.Now().Add(300 * time.Millisecond))
		conn.Write(p)
		buf := make([]byte, 4096)
		conn.Read(buf)
		conn.Close()
	}
}

// garbageUDP sends random, typed-garbage and oversize datagrams.
func garbageUDP(t *testing.T, addr string, rng *rand.Rand) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatalf("udp dial %s: %v", addr, err)
	}
	defer conn.Close()
	for typ := 0; typ < 16; typ++ {
		conn.Write(append([]byte{byte(typ)}, randomBytes(rng, 512)...))
		conn.Write([]byte{byte(typ)}) // truncated: the type and nothing else
	}
	conn.Write(randomBytes(rng, 60000)) // near the largest datagram
	// A compound message (type 7) claiming 255 parts of huge length.
	conn.Write(append([]byte{7, 255}, bytesRepeat(0xff, 510)...))
}

func bytesRepeat(b byte, n int) []byte { return []byte(strings.Repeat(string(b), n)) }

func dialNode(t *testing.T, n *node) *grpc.ClientConn {
	cc, err := grpc.NewClient(n.nodeAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("grpc dial node %d: %v", n.id, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// garbageRaft sends well-formed gRPC carrying bad Raft payloads: from an
// unknown sender, undecodable raft messages from a real peer, unknown
// groups, snapshots whose message is garbage or that stop midway, and a
// message over the size limit. Every outcome is logged; none may crash.
func garbageRaft(t *testing.T, n *node, rng *rand.Rand) {
	cc := dialNode(t, n)
	client := raftlogpb.NewRaftClient(cc)
	peer := uint64(n.id%3 + 1)
	self := uint64(n.id)
	batches := []*raftlogpb.RaftBatch{
		{From: 99, To: self, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: randomBytes(rng, 64)}}},
		{From: peer, To: self + 10, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: randomBytes(rng, 64)}}},
		{From: peer, To: self, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: randomBytes(rng, 64)}, {Group: 9999, Message: randomBytes(rng, 64)}}},
		{From: peer, To: self, Messages: []*raftlogpb.RaftEnvelope{{Group: 2, Message: nil}, {Group: 0, Message: randomBytes(rng, 4096)}}},
		{From: peer, To: self, Messages: []*raftlogpb.RaftEnvelope{{Group: 1, Message: randomBytes(rng, 20<<20)}}}, // over the gRPC limit
	}
	for i, b := range batches {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := client.Send(ctx)
		if err == nil {
			err = s.Send(b)
			if err == nil {
				_, err = s.CloseAndRecv()
			}
		}
		cancel()
		t.Logf("raft batch %d: %v", i, err)
	}
	chunks := [][]*raftlogpb.SnapshotChunk{
		{{Group: 1, From: peer, To: self, Message: randomBytes(rng, 128), Data: randomBytes(rng, 1024), Last: true}},
		{{Group: 1, From: 99, To: self, Message: randomBytes(rng, 128), Last: true}},
		{{Group: 9999, From: peer, To: self, Message: nil, Data: randomBytes(rng, 1024)}}, // never finished
	}
	for i, cs := range chunks {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := client.Snapshot(ctx)
		if err == nil {
			for _, ch := range cs {
				if err = s.Send(ch); err != nil {
					break
				}
			}
			if err == nil && cs[len(cs)-1].Last {
				var ack *raftlogpb.SnapshotAck
				ack, err = s.CloseAndRecv()
				if err == nil {
					err = fmt.Errorf("ack %v", ack)
				}
			}
		}
		cancel() // abandons the unfinished snapshot stream
		t.Logf("snapshot %d: %v", i, err)
	}
}

// garbageDispatch sends dispatch requests a correct ingress never sends:
// no body, unknown partitions, malformed ids, an invocation addressed to
// the wrong partition, metadata commands to a partition, and an oversize
// request. Each must get an answer (an error) or a closed stream, never a
// crash. It returns nothing: the test checks the node afterwards.
func garbageDispatch(t *testing.T, n *node, rng *rand.Rand) {
	cc := dialNode(t, n)
	client := rpc.NewDispatchClient(cc)
	wrongPartitionID := invocation.Random()
	wrongPart := invocation.PartitionFor(wrongPartitionID.PartitionKey(), robustnessPartitions)%robustnessPartitions + 1
	invoke := func(id []byte) *rpc.Invoke {
		return &rpc.Invoke{InvocationId: id, RequestId: invocation.NewRequestID(), Service: "Echo", Handler: "echo", Body: []byte(`"garbage"`)}
	}
	reqs := map[string]*rpc.DispatchRequest{
		"no body":               {Partition: 1},
		"unknown partition":     {Partition: 9999, Body: &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: randomBytes(rng, 24)}}},
		"append without invoke": {Partition: 1, Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{}}},
		"append short id":       {Partition: 1, RequestId: invocation.NewRequestID(), Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: invoke([]byte{1, 2, 3})}}},
		"append wrong partition": {Partition: wrongPart, RequestId: invocation.NewRequestID(),
			Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: invoke(wrongPartitionID.Bytes())}}},
		"append to metadata group": {Partition: 0, RequestId: invocation.NewRequestID(), Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: invoke(invocation.Random().Bytes())}}},
		"output garbage id":        {Partition: 2, Body: &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: randomBytes(rng, 7)}}},
		"attach garbage id":        {Partition: 2, TimeoutMs: 500, Body: &rpc.DispatchRequest_Attach{Attach: &rpc.AttachInvocation{InvocationId: randomBytes(rng, 40)}}},
		"status garbage id":        {Partition: 3, Body: &rpc.DispatchRequest_Status{Status: &rpc.GetStatus{}}},
		"cancel garbage id":        {Partition: 4, Body: &rpc.DispatchRequest_Cancel{Cancel: &rpc.CancelInvocation{InvocationId: randomBytes(rng, 24)}}},
		"put service to a partition": {Partition: 1, RequestId: invocation.NewRequestID(),
			Body: &rpc.DispatchRequest_PutService{PutService: &rpc.PutService{Service: &rpc.Service{Name: "\x00bad", Url: "::"}}}},
		"negative timeout": {Partition: 1, TimeoutMs: -5, Body: &rpc.DispatchRequest_Output{Output: &rpc.GetOutput{InvocationId: invocation.Random().Bytes()}}},
	}
	names := make([]string, 0, len(reqs))
	for name := range reqs {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		answer := dispatchOnce(client, reqs[name], uint64(i+1))
		t.Logf("dispatch %q to node %d: %s", name, n.id, answer)
	}
	big := &rpc.DispatchRequest{Partition: 1, RequestId: invocation.NewRequestID(),
		Body: &rpc.DispatchRequest_Append{Append: &rpc.AppendInvocation{Invoke: invoke(invocation.Random().Bytes())}}}
	big.GetAppend().Invoke.Body = randomBytes(rng, 20<<20)
	t.Logf("dispatch oversize (%d bytes): %s", proto.Size(big), dispatchOnce(client, big, 999))
}

// dispatchOnce sends one request on a fresh stream and describes the
// answer (or the stream's error) received within a few seconds.
func dispatchOnce(client rpc.DispatchClient, req *rpc.DispatchRequest, corr uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := client.Stream(ctx)
	if err != nil {
		return "stream: " + err.Error()
	}
	req.CorrelationId = corr
	if err := s.Send(req); err != nil {
		return "send: " + err.Error()
	}
	resp, err := s.Recv()
	if err != nil {
		return "recv: " + err.Error()
	}
	s.CloseSend()
	return resp.String()
}
