package testutil

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// RoundTrip is the body of a fuzz target of a protobuf message: it decodes
// data into a fresh message of newM's type and, when that succeeds, checks
// that re-encoding and decoding again gives the same message.
func RoundTrip[M proto.Message](t *testing.T, data []byte, newM func() M) (M, bool) {
	m := newM()
	if err := proto.Unmarshal(data, m); err != nil {
		return m, false
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatalf("%T decoded but does not encode: %v", m, err)
	}
	m2 := newM()
	if err := proto.Unmarshal(again, m2); err != nil {
		t.Fatalf("%T re-encoding does not decode: %v", m, err)
	}
	if !proto.Equal(m, m2) {
		t.Fatalf("%T round trip changed the message:\n%v\n%v", m, m, m2)
	}
	return m, true
}

// Seeds adds the empty input and the encoding of each message to a fuzz
// target's corpus.
func Seeds(f *testing.F, msgs ...proto.Message) {
	f.Add([]byte{})
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}
