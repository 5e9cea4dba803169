package fencelockv1_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// vtMessage is a message with vtprotobuf's generated methods.
type vtMessage interface {
	proto.Message
	MarshalVT() ([]byte, error)
	UnmarshalVT([]byte) error
	SizeVT() int
}

// TestVTProto_AgreesWithProto: every field of the Session's messages,
// each oneof choice in turn, survives vtprotobuf's encoding read back by
// protobuf's and the other way round. It fails if lock_vtproto.pb.go is
// older than lock.pb.go (a field it does not know is dropped): run
// scripts/genproto.sh.
func TestVTProto_AgreesWithProto(t *testing.T) {
	for _, m := range []vtMessage{&fencelockv1.SessionRequest{}, &fencelockv1.SessionResponse{}} {
		for choice := range 16 {
			in := m.ProtoReflect().New().Interface().(vtMessage)
			fill(in.ProtoReflect(), choice, 3)
			vt, err := in.MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			if in.SizeVT() != len(vt) || proto.Size(in) != len(vt) {
				t.Fatalf("%T choice %d: SizeVT %d, proto.Size %d, MarshalVT wrote %d", in, choice, in.SizeVT(), proto.Size(in), len(vt))
			}
			back := in.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(vt, back); err != nil || !proto.Equal(in, back) {
				t.Fatalf("%T choice %d: protobuf read vtprotobuf's encoding as %v (%v), want %v", in, choice, back, err, in)
			}
			pb, err := proto.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			vtBack := in.ProtoReflect().New().Interface().(vtMessage)
			if err := vtBack.UnmarshalVT(pb); err != nil || !proto.Equal(in, vtBack) {
				t.Fatalf("%T choice %d: vtprotobuf read protobuf's encoding as %v (%v), want %v", in, choice, vtBack, err, in)
			}
		}
	}
}

// fill sets every field of m (the choice-th member of each oneof, in
// turn) to a value that is not the zero one, down to depth messages.
func fill(m protoreflect.Message, choice, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() && o.Fields().Get(choice%o.Fields().Len()) != f {
			continue
		}
		switch {
		case f.IsMap():
			continue // the Session's messages have none
		case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
			if depth == 0 {
				continue
			}
			if f.IsList() {
				l := m.Mutable(f).List()
				for range 2 {
					e := l.NewElement()
					fill(e.Message(), choice, depth-1)
					l.Append(e)
				}
				continue
			}
			fill(m.Mutable(f).Message(), choice, depth-1)
		case f.IsList():
			l := m.Mutable(f).List()
			l.Append(scalar(f, 1))
			l.Append(scalar(f, 2))
		default:
			m.Set(f, scalar(f, int(f.Number())))
		}
	}
}

// scalar is a value of f's kind that is not the zero one.
func scalar(f protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vs := f.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n) << 33)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n) << 33)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(f.Name()))
	default: // bytes
		return protoreflect.ValueOfBytes([]byte(f.Name()))
	}
}
