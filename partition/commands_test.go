package partition

import (
	"testing"

	"github.com/raftgate/raftgate/rpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestStampedInvokeCopiesEveryField fails when a field is added to
// rpc.Invoke and stampedInvokeCmd does not copy it: the field would be
// silently dropped from every proposal.
func TestStampedInvokeCopiesEveryField(t *testing.T) {
	inv := &rpc.Invoke{}
	m := inv.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			l.Append(l.NewElement())
		case fd.Kind() == protoreflect.MessageKind:
			m.Mutable(fd)
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(string(fd.Name())))
		case fd.Kind() == protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte(fd.Name())))
		case fd.Kind() == protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case fd.Kind() == protoreflect.Int64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(int64(fd.Number())))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(-int32(fd.Number()))) // negative: a sign-extended varint
		case fd.Kind() == protoreflect.Uint64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(uint64(fd.Number())))
		default:
			t.Fatalf("field %s: kind %v not filled by this test; extend it", fd.Name(), fd.Kind())
		}
	}
	before := proto.Clone(inv)

	got := stampedInvokeCmd(inv, 12345).GetInvoke()

	want := proto.Clone(inv).(*rpc.Invoke)
	want.ProposedAtUnixMs = 12345
	want.NotBeforeUnixMs = 12345 + want.GetDelayMs() // the leader stamps it from the delay
	if !proto.Equal(got, want) {
		t.Fatalf("stamped copy differs from the original:\n got  %v\n want %v", got, want)
	}
	if !proto.Equal(inv, before) {
		t.Fatalf("the caller's invoke was modified: %v", inv)
	}
}

func TestStampedInvokeAllocs(t *testing.T) {
	inv := newInvoke("greeter", 1)
	allocs := testing.AllocsPerRun(100, func() { _ = stampedInvokeCmd(inv, 1) })
	if allocs > 1 {
		t.Fatalf("stampedInvokeCmd took %.0f allocations, want 1", allocs)
	}
}
