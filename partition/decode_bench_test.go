package partition

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftgate/raftgate/rpc"
)

// BenchmarkDecodeBatch decodes the entries the applier sees most, a
// proposer's batch of Invokes and a send's Invokes and Completes, with the
// hand-written decodeBatch and with proto.Unmarshal. Compare with
// benchstat -col /impl; docs/benchmarks.md has the figures, vtprotobuf's
// generated decoder included.
func BenchmarkDecodeBatch(b *testing.B) {
	var invokes, send []*rpc.Command
	for i := range 8 {
		inv := newInvoke("greeter", i)
		invokes = append(invokes, invokeCmd(inv))
		if i < 4 {
			send = append(send, invokeCmd(inv), completeCmd(&rpc.Complete{InvocationId: inv.InvocationId,
				Result: &rpc.Result{Status: 200, Body: inv.Body, ContentType: "text/plain", Attempts: 1}, ProposedAtUnixMs: 5}))
		}
	}
	impls := []struct {
		name   string
		decode func([]byte) error
	}{
		{"hand", func(d []byte) error { _, err := decodeBatch(d); return err }},
		{"proto", func(d []byte) error { return proto.Unmarshal(d, &rpc.CommandBatch{}) }},
	}
	for _, batch := range []struct {
		name string
		cmds []*rpc.Command
	}{{"invokes=8", invokes}, {"send=4+4", send}} {
		data, err := rpc.EncodeBatch(batch.cmds...)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range impls {
			b.Run(batch.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if err := impl.decode(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
