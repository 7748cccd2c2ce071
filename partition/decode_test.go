package partition

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomInvoke sets a random subset of an Invoke's fields; headers only
// with withHeaders (they are left to proto.Unmarshal).
func randomInvoke(r *rand.Rand, withHeaders bool) *rpc.Invoke {
	bs := func() []byte {
		if r.IntN(4) == 0 {
			return nil
		}
		b := make([]byte, r.IntN(30))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return strings.Repeat("sé", r.IntN(3)+1)
	}
	inv := &rpc.Invoke{
		InvocationId: bs(), RequestId: bs(), Body: bs(),
		Service: str(), Handler: str(), ContentType: str(), IdempotencyKey: str(), Key: str(),
		ScheduleId: str(), CallbackUrl: str(), Scope: str(), ScheduledAtUnixMs: r.Int64N(1 << 40), Priority: r.Int32N(201) - 100,
		ProposedAtUnixMs: r.Int64() - r.Int64(), NotBeforeUnixMs: r.Int64N(1 << 40), Exclusive: r.IntN(2) == 0,
		RejectReusedKey: r.IntN(2) == 0,
	}
	if r.IntN(5) == 0 {
		inv.ProposerTerm = r.Uint64()
	}
	if r.IntN(2) == 0 {
		inv.ServiceRegisteredIndex = r.Uint64N(1000)
	}
	if r.IntN(3) == 0 {
		inv.DelayMs = proto.Int64(r.Int64N(1 << 30)) // 0 included: present, not absent
	}
	if withHeaders && r.IntN(4) == 0 {
		inv.Headers = []*rpc.Header{{Name: "x-a", Value: "1"}}
	}
	return inv
}

// randomComplete sets a random subset of a Complete's fields.
func randomComplete(r *rand.Rand) *rpc.Complete {
	c := &rpc.Complete{ProposedAtUnixMs: r.Int64() - r.Int64()}
	if r.IntN(4) != 0 {
		c.InvocationId = make([]byte, r.IntN(30))
		for i := range c.InvocationId {
			c.InvocationId[i] = byte(r.Uint32())
		}
	}
	if r.IntN(5) == 0 {
		c.ProposerTerm = r.Uint64()
	}
	if r.IntN(6) != 0 {
		c.Result = &rpc.Result{Status: r.Uint32N(600), Failed: r.IntN(2) == 0, Attempts: r.Uint32()}
		if r.IntN(3) != 0 {
			c.Result.Body = []byte(strings.Repeat("b", r.IntN(40)))
		}
		if r.IntN(2) == 0 {
			c.Result.ContentType = "application/json"
		}
		if r.IntN(3) == 0 {
			c.Result.Error = "gave up é"
		}
	}
	return c
}

// checkDecodeBatch compares decodeBatch with rpc.DecodeBatch on data.
func checkDecodeBatch(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := rpc.DecodeBatch(data)
	got, err := decodeBatch(data)
	if (err != nil) != (wantErr != nil) || errors.Is(err, rpc.ErrUnknownVersion) != errors.Is(wantErr, rpc.ErrUnknownVersion) {
		t.Fatalf("decode %x: error %v, rpc.DecodeBatch's %v", data, err, wantErr)
	}
	if wantErr == nil && !proto.Equal(got, want) {
		t.Fatalf("decode %x:\n got  %v\n want %v", data, got, want)
	}
}

func TestDecodeBatchMatchesDecodeBatch(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	fast := 0
	for range 2000 {
		cmds := make([]*rpc.Command, r.IntN(4)+1)
		headers := false
		for i := range cmds {
			if r.IntN(3) == 0 {
				cmds[i] = completeCmd(randomComplete(r))
				continue
			}
			inv := randomInvoke(r, true)
			headers = headers || len(inv.Headers) > 0
			cmds[i] = invokeCmd(inv)
		}
		other := r.IntN(6) == 0
		if other {
			cmds = append(cmds, cancelCmd(&rpc.Cancel{InvocationId: []byte("id")})) // left to proto
		}
		data, err := rpc.EncodeBatch(cmds...)
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeBatch(t, data)
		if _, ok := decodeSendBatch(data); ok {
			fast++
		} else if !headers && !other {
			t.Fatalf("batch %v left to proto.Unmarshal", cmds)
		}
	}
	if fast == 0 {
		t.Fatal("no batch took the fast path")
	}
}

func TestDecodeBatchOddInput(t *testing.T) {
	good, err := rpc.EncodeBatch(invokeCmd(newInvoke("greeter", 1)))
	if err != nil {
		t.Fatal(err)
	}
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	version := func(v uint64) []byte { return protowire.AppendVarint(tag(nil, batchVersion, protowire.VarintType), v) }
	command := func(b, inv []byte) []byte {
		return protowire.AppendBytes(tag(b, batchCommands, protowire.BytesType), protowire.AppendBytes(tag(nil, commandInvoke, protowire.BytesType), inv))
	}
	cases := map[string][]byte{
		"empty":            {},
		"no commands":      version(1),
		"version 2":        command(version(2), nil),
		"truncated":        good[:len(good)-1],
		"unknown field":    command(version(1), protowire.AppendVarint(tag(nil, 99, protowire.VarintType), 1)),
		"invalid utf-8":    command(version(1), protowire.AppendBytes(tag(nil, invokeService, protowire.BytesType), []byte{0xff})),
		"wrong wire type":  command(version(1), protowire.AppendFixed64(tag(nil, invokeProposedAt, protowire.Fixed64Type), 1)),
		"repeated field":   command(version(1), append(protowire.AppendString(tag(nil, invokeService, protowire.BytesType), "a"), protowire.AppendString(tag(nil, invokeService, protowire.BytesType), "b")...)),
		"empty invoke":     command(version(1), nil),
		"two invokes":      append(command(version(1), nil), good[2:]...),
		"merged oneof":     append(version(1), protowire.AppendBytes(tag(nil, batchCommands, protowire.BytesType), append(protowire.AppendBytes(tag(nil, commandInvoke, protowire.BytesType), protowire.AppendString(tag(nil, invokeService, protowire.BytesType), "a")), protowire.AppendBytes(tag(nil, commandInvoke, protowire.BytesType), protowire.AppendString(tag(nil, invokeHandler, protowire.BytesType), "h"))...))...),
		"version repeated": append(command(version(1), nil), version(1)...),
	}
	complete := func(b, c []byte) []byte {
		return protowire.AppendBytes(tag(b, batchCommands, protowire.BytesType), protowire.AppendBytes(tag(nil, commandComplete, protowire.BytesType), c))
	}
	result := func(res []byte) []byte {
		return protowire.AppendBytes(tag(nil, completeResult, protowire.BytesType), res)
	}
	for name, data := range map[string][]byte{
		"empty complete":           complete(version(1), nil),
		"empty result":             complete(version(1), result(nil)),
		"repeated result":          complete(version(1), append(result(protowire.AppendVarint(tag(nil, resultStatus, protowire.VarintType), 200)), result(protowire.AppendVarint(tag(nil, resultAttempts, protowire.VarintType), 2))...)),
		"complete unknown field":   complete(version(1), protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1)),
		"result unknown field":     complete(version(1), result(protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1))),
		"result invalid utf-8":     complete(version(1), result(protowire.AppendBytes(tag(nil, resultError, protowire.BytesType), []byte{0xff}))),
		"result wrong wire type":   complete(version(1), result(protowire.AppendFixed32(tag(nil, resultStatus, protowire.Fixed32Type), 1))),
		"complete wrong wire type": complete(version(1), protowire.AppendBytes(tag(nil, completeProposedAt, protowire.BytesType), nil)),
		"result truncated":         complete(version(1), result([]byte{byte(resultBody<<3 | 2), 5, 'a'})),
		"status over 32 bits":      complete(version(1), result(protowire.AppendVarint(tag(nil, resultStatus, protowire.VarintType), 1<<40|200))),
		"invoke then complete":     complete(command(version(1), nil), result(nil)),
	} {
		cases[name] = data
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { checkDecodeBatch(t, data) })
	}
}

// TestDecodeBatchCopiesBytes pins the ownership contract: decoded bytes
// fields do not alias the entry, and cannot grow into each other.
func TestDecodeBatchCopiesBytes(t *testing.T) {
	data, err := rpc.EncodeBatch(invokeCmd(newInvoke("greeter", 1)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	inv := b.Commands[0].GetInvoke()
	id := inv.InvocationId
	if cap(id) != len(id) {
		t.Fatalf("invocation id cap %d, len %d: an append would overwrite the next field", cap(id), len(id))
	}
	want := proto.Clone(inv)
	clear(data)
	if !proto.Equal(inv, want) {
		t.Fatalf("decoded invoke changed with the entry's bytes: %v", inv)
	}
}

func TestDecodeBatchAllocs(t *testing.T) {
	cmds := make([]*rpc.Command, 8)
	for i := range cmds {
		cmds[i] = invokeCmd(newInvoke("greeter", i))
	}
	data, err := rpc.EncodeBatch(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	// Four per batch, and one per string field (service, handler, content type).
	const want = 4 + 8*3
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeBatch(data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > want {
		t.Fatalf("decoding 8 invokes took %.0f allocations, want %d", allocs, want)
	}
}

// A send's entry: Invokes and Completes, the same number of allocations
// per batch, and one per string field.
func TestDecodeSendBatchAllocs(t *testing.T) {
	var cmds []*rpc.Command
	for i := range 4 {
		inv := newInvoke("greeter", i)
		cmds = append(cmds, invokeCmd(inv), completeCmd(&rpc.Complete{InvocationId: inv.InvocationId,
			Result: &rpc.Result{Status: 200, Body: inv.Body, ContentType: "text/plain", Attempts: 1}, ProposedAtUnixMs: 5}))
	}
	data, err := rpc.EncodeBatch(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeSendBatch(data); !ok {
		t.Fatal("a batch of Invokes and Completes left to proto.Unmarshal")
	}
	// Five per batch; per Invoke service, handler and content type, per
	// Complete its result's content type.
	const want = 5 + 4*3 + 4*1
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeBatch(data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > want {
		t.Fatalf("decoding 4 invokes and 4 completes took %.0f allocations, want %d", allocs, want)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10 {
		data, err := rpc.EncodeBatch(invokeCmd(randomInvoke(r, true)), invokeCmd(randomInvoke(r, false)), completeCmd(randomComplete(r)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeBatch(t, data) })
}

// Every field of rpc.Invoke is either decoded by decodeInvoke or known to
// take rpc.DecodeBatch's path (headers): a field added to Invoke without
// extending decodeInvoke would quietly send every batch the slow way.
func TestDecodeInvokeKnowsEveryField(t *testing.T) {
	known := map[int]bool{
		invokeInvocationID: true, invokeRequestID: true, invokeService: true, invokeHandler: true,
		invokeBody: true, invokeContentType: true, invokeIdempotencyKey: true, invokeProposerTerm: true,
		invokeProposedAt: true, invokeNotBefore: true, invokeKey: true, invokeExclusive: true,
		invokeRegisteredAt: true, invokeDelay: true, invokeScheduleID: true, invokeScheduledAt: true, invokeCallbackURL: true,
		invokeRejectReusedKey: true, invokeBodyDigest: true, invokeScope: true, invokePriority: true,
	}
	const headers = 7 // repeated messages: left to proto.Unmarshal
	fields := (&rpc.Invoke{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if n := int(f.Number()); !known[n] && n != headers {
			t.Errorf("rpc.Invoke field %s (%d) is not decoded by decodeInvoke: add it there and to stampedInvokeCmd", f.Name(), n)
		}
	}
}

// The same for rpc.Complete and rpc.Result, which decodeComplete decodes
// whole.
func TestDecodeCompleteKnowsEveryField(t *testing.T) {
	for msg, known := range map[proto.Message]map[int]bool{
		&rpc.Complete{}: {completeInvocationID: true, completeResult: true, completeProposerTerm: true, completeProposedAt: true},
		&rpc.Result{}: {resultStatus: true, resultBody: true, resultContentType: true, resultFailed: true,
			resultError: true, resultAttempts: true},
	} {
		fields := msg.ProtoReflect().Descriptor().Fields()
		for i := range fields.Len() {
			if f := fields.Get(i); !known[int(f.Number())] {
				t.Errorf("%s field %s (%d) is not decoded by decodeComplete: add it there",
					msg.ProtoReflect().Descriptor().Name(), f.Name(), f.Number())
			}
		}
	}
}
