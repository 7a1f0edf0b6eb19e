// Package raw is a gRPC codec that passes message bytes through untouched.
//
// The load generator sends request bytes that bench/run.py serialized once
// with the daemon's own Python protobuf classes, so every target receives
// the exact same bytes and the generator spends no CPU on protobuf. The echo
// servers answer with the bytes they got, so they do no protobuf work
// either: they measure the gRPC transport alone.
package raw

import (
	"fmt"

	"google.golang.org/grpc/mem"
)

// EchoMethod is the one method both echo servers serve.
const EchoMethod = "/squawk.bench.v1.Echo/Echo"

// Codec marshals a []byte (or *[]byte) as itself and unmarshals into a
// *[]byte. Its name is "proto", so the wire content-type is the usual
// application/grpc+proto and a protobuf server on the other end accepts it.
type Codec struct{}

// Marshal returns v's bytes without copying them.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch b := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	case *[]byte:
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	default:
		return nil, fmt.Errorf("raw codec: cannot marshal %T, want []byte", v)
	}
}

// Unmarshal copies data into *v: gRPC frees data when Unmarshal returns.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T, want *[]byte", v)
	}
	*b = data.Materialize()
	return nil
}

// Name is the content-subtype on the wire.
func (Codec) Name() string { return "proto" }
