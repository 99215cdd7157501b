package dcp

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

var testLimits = Limits{Ops: 1000, Marks: 8}

// dict makes a Dict of keys and values, as SETITEMS does.
func dict(kv ...any) *Dict {
	d := &Dict{}
	for i := 0; i < len(kv); i += 2 {
		d.set(kv[i], kv[i+1])
	}
	return d
}

// TestUnpickle decodes what pickle writes for the values DCP's files hold,
// by the opcodes of protocols 2 and 4.
func TestUnpickle(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want any
	}{
		{"int", "\x80\x02K\x02.", int64(2)},
		{"negative int", "\x80\x02J\xfe\xff\xff\xff.", int64(-2)},
		{"long", "\x80\x02\x8a\x05\x00\x00\x00\x00\x01.", int64(1) << 32},
		{"negative long", "\x80\x02\x8a\x01\xff.", int64(-1)},
		{"float", "\x80\x02G?\xb9\x99\x99\x99\x99\x99\x9a.", 0.1},
		{"bytes, protocol 2", "\x80\x02c_codecs\nencode\nq\x00X\x04\x00\x00\x00a\xc3\xbfbq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04.", []byte("a\xffb")},
		{"empty bytes, protocol 2", "\x80\x02c__builtin__\nbytes\nq\x00)Rq\x01.", []byte{}},
		{"bytes, protocol 4", "\x80\x04C\x02ab\x94.", []byte("ab")},
		{"tuple and memo", "\x80\x04\x8c\x01a\x94h\x00\x86.", Tuple{"a", "a"}},
		{"a key given twice", "\x80\x04}(K\x01K\x02K\x01K\x03u.", dict(int64(1), int64(3))},
		{"dict", "\x80\x04}\x94(\x8c\x01k\x94K\x01\x8c\x01j\x94]\x94(K\x01K\x02eu.",
			dict("k", int64(1), "j", &List{Items: []any{int64(1), int64(2)}})},
		{"object", "\x80\x04\x8c\x01m\x8c\x01C\x93)\x81}(\x8c\x01fNub.",
			&Object{Callable: Global{"m", "C"}, Args: Tuple{}, State: dict("f", nil)}},
	} {
		got, err := Unpickle(tc.name, []byte(tc.data), testLimits)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %#v, %v; want %#v", tc.name, got, err, tc.want)
		}
	}
}

// TestUnpickleRefusesHostile: a pickle cut short, with a length past its
// end, an opcode this reader does not execute, or past the limits is
// refused with an error naming the file and the opcode's offset, and
// nothing is allocated for a length the data does not hold.
func TestUnpickleRefusesHostile(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		offset     int
		why        string
	}{
		{"empty", "", 0, "ends before STOP"},
		{"cut short", "\x80\x02K", 2, "wants 1 bytes, 0 are left"},
		{"no STOP", "\x80\x02K\x01", 4, "ends before STOP"},
		{"huge string", "\x80\x04X\xff\xff\xff\xff.", 2, "wants 4294967295 bytes"},
		{"huge string 8", "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", 2, "wants 18446744073709551615 bytes"},
		{"huge frame", "\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7fK\x01.", 2, "a frame of"},
		{"text protocol", "I1\n.", 0, "opcode 0x49 (\"I\") is not one this reader executes"},
		{"protocol 1 opcode", "\x80\x02U\x01a.", 2, "opcode 0x55"},
		{"protocol 6", "\x80\x06K\x01.", 0, "pickle protocol 6"},
		{"unstored memo", "\x80\x02h\x05.", 2, "memo entry 5 was never stored"},
		{"memo with a gap", "\x80\x02K\x01q\x05.", 4, "memo entry 5 stored with 0 before it"},
		{"empty stack", "\x80\x02\x85.", 2, "finds the stack empty"},
		{"pop below mark", "\x80\x02K\x01(\x85.", 5, "finds the stack empty"},
		{"leftovers", "\x80\x02K\x01K\x02.", 6, "STOP leaves 1 values"},
		{"after STOP", "\x80\x02K\x01.K", 5, "1 bytes after STOP"},
		{"append to int", "\x80\x02K\x01K\x02a.", 6, "APPEND to a int"},
		{"setitem into list", "\x80\x02]K\x01K\x02s.", 7, "SETITEM into a list"},
		{"odd setitems", "\x80\x02}(K\x01u.", 6, "odd number"},
		{"long of 9 bytes", "\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", 2, "an integer of 9 bytes"},
		{"global without newline", "\x80\x02cmodule", 2, "no newline"},
		{"reduce of non-tuple", "\x80\x02cm\nf\nK\x01R.", 9, "arguments that are a int"},
		{"call of an int", "\x80\x02K\x01)R.", 5, "a call of a int"},
		{"build twice", "\x80\x02cm\nC\n)R}b}b.", 12, "BUILD of a m.C object"},
		{"non-utf8", "\x80\x04\x8c\x01\xff.", 2, "not UTF-8"},
		{"latin1 past 255", "\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00\xc4\x80X\x06\x00\x00\x00latin1\x86R.", 37, "past latin1"},
		{"too many marks", "\x80\x02" + strings.Repeat("(", 9), 10, "MARKs nested more than 8 deep"},
		{"too many opcodes", "\x80\x02" + strings.Repeat("N0", 600) + "N.", 1000, "more than 1000 opcodes"},
	} {
		_, err := Unpickle("f.pkl", []byte(tc.data), testLimits)
		var pe *PickleError
		if !errors.As(err, &pe) || pe.Name != "f.pkl" || pe.Offset != tc.offset || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v; want an error at byte %d saying %q", tc.name, err, tc.offset, tc.why)
		}
	}
}

// FuzzUnpickle: no input makes the reader panic or run past its limits;
// the seeds are the fixtures' pickles.
func FuzzUnpickle(f *testing.F) {
	for _, p := range []string{"testdata/loader/.metadata", "testdata/nested/.metadata"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00aq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04."))
	f.Fuzz(func(t *testing.T, data []byte) {
		Unpickle("fuzz", data, Limits{Ops: 1 << 14, Marks: 16}) //nolint:errcheck // any error is fine; a panic is not
	})
}
