package dcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// The values a pickle decodes to. Nothing a pickle names is called: a
// class or function is a Global, what it would build an *Object holding
// its arguments and state, for the caller to read as data. The only
// constructors taken for what they make are protocol 2's spellings of
// bytes (_codecs.encode(str, "latin1"), bytes()) and collections.OrderedDict(),
// which are data, not code.
//
// None is nil; bool, int64, float64, string and []byte are themselves.
type (
	// Tuple is a Python tuple.
	Tuple []any
	// List is a Python list: a pointer, as a list shared through the memo
	// is one list.
	List struct{ Items []any }
	// Dict is a Python dict in insertion order; its keys may be any value
	// (DCP's storage_data is keyed by objects).
	Dict struct {
		Keys, Values []any
		index        map[any]int // of the string and int keys, once there are many
	}
	// Global is a class or function named by module and name.
	Global struct{ Module, Name string }
	// Object is what REDUCE (Callable(*Args)) or NEWOBJ
	// (Callable.__new__(Callable, *Args)) would make, with the state BUILD
	// gave it (nil if none).
	Object struct {
		Callable any
		Args     Tuple
		State    any
	}
	// PersistentID is an object a pickle names by a persistent id
	// (torch.save's tensors' storages).
	PersistentID struct{ ID any }
)

// Get returns the value of a dict's string key.
func (d *Dict) Get(key string) (any, bool) {
	if i, ok := d.find(key); ok {
		return d.Values[i], true
	}
	return nil, false
}

// Class is the global an object was made by ("" when not a Global).
func (o *Object) Class() string {
	if g, ok := o.Callable.(Global); ok {
		return g.Module + "." + g.Name
	}
	return ""
}

// Limits bound what decoding a pickle may cost, whatever its bytes say.
type Limits struct {
	// Ops is the most opcodes executed: each allocates at most a fixed
	// amount beyond the bytes it reads, so Ops and the input's length bound
	// the memory a pickle can take.
	Ops int
	// Marks is the deepest nesting of MARKs (tuples, lists and dicts being
	// built inside one another).
	Marks int
}

// PickleError is a pickle refused: the file, the offset of the opcode at
// fault and why.
type PickleError struct {
	Name   string
	Offset int
	Reason string
}

func (e *PickleError) Error() string {
	return fmt.Sprintf("%s: pickle at byte %d: %s", e.Name, e.Offset, e.Reason)
}

// unpickler is the state of one decoding.
type unpickler struct {
	name   string
	data   []byte
	pos    int // the next byte to read
	at     int // the offset of the opcode being executed
	lim    Limits
	stack  []any
	marks  []int // stack lengths at each MARK
	memo   []any // by index: pickle numbers entries from 0 without gaps
	result any
	done   bool
}

// Unpickle decodes the pickle data (name is for errors) written by
// Python's pickle at protocol 2 to 5 with the opcodes that pickle.dump
// and torch.save write for plain data, dataclasses and tensors; any other
// opcode is refused by name and offset, as is anything past the limits or
// the data's end.
func Unpickle(name string, data []byte, lim Limits) (any, error) {
	u := &unpickler{name: name, data: data, lim: lim}
	for ops := 0; !u.done; ops++ {
		if ops >= lim.Ops {
			return nil, u.fail("more than %d opcodes", lim.Ops)
		}
		if u.pos >= len(data) {
			return nil, u.failAt(len(data), "the data ends before STOP")
		}
		u.at = u.pos
		op := data[u.pos]
		u.pos++
		if err := u.step(op); err != nil {
			return nil, err
		}
	}
	if u.pos != len(data) {
		return nil, u.failAt(u.pos, "%d bytes after STOP", len(data)-u.pos)
	}
	return u.result, nil
}

func (u *unpickler) fail(format string, args ...any) error {
	return u.failAt(u.at, format, args...)
}

func (u *unpickler) failAt(off int, format string, args ...any) error {
	return &PickleError{Name: u.name, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// read takes the next n bytes, refusing a length past the data's end
// before anything is allocated.
func (u *unpickler) read(n uint64) ([]byte, error) {
	if n > uint64(len(u.data)-u.pos) {
		return nil, u.fail("opcode 0x%02x wants %d bytes, %d are left", u.data[u.at], n, len(u.data)-u.pos)
	}
	b := u.data[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return b, nil
}

// uint reads an n-byte little-endian unsigned integer (n is 1, 2, 4 or 8).
func (u *unpickler) uint(n int) (uint64, error) {
	b, err := u.read(uint64(n))
	if err != nil {
		return 0, err
	}
	var buf [8]byte
	copy(buf[:], b)
	return binary.LittleEndian.Uint64(buf[:]), nil
}

// line reads up to a newline (GLOBAL's module and name), at most 256 bytes.
func (u *unpickler) line() (string, error) {
	rest := u.data[u.pos:min(len(u.data), u.pos+257)]
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		return "", u.fail("GLOBAL's name has no newline within 256 bytes")
	}
	u.pos += i + 1
	return string(rest[:i]), nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

// pop takes the top of the stack, never from below the last MARK.
func (u *unpickler) pop() (any, error) {
	floor := 0
	if len(u.marks) > 0 {
		floor = u.marks[len(u.marks)-1]
	}
	if len(u.stack) <= floor {
		return nil, u.fail("opcode 0x%02x finds the stack empty", u.data[u.at])
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

// top is the value on top of the stack, which the opcode modifies.
func (u *unpickler) top() (any, error) {
	v, err := u.pop()
	if err == nil {
		u.push(v)
	}
	return v, err
}

// popMark takes the values pushed since the last MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.fail("opcode 0x%02x has no MARK before it", u.data[u.at])
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

// popN takes the top n values, in the order they were pushed.
func (u *unpickler) popN(n int) (Tuple, error) {
	t := make(Tuple, n)
	for i := n - 1; i >= 0; i-- {
		v, err := u.pop()
		if err != nil {
			return nil, err
		}
		t[i] = v
	}
	return t, nil
}

// text reads a string of n bytes, which must be UTF-8.
func (u *unpickler) text(n uint64) (string, error) {
	b, err := u.read(n)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", u.fail("a string that is not UTF-8")
	}
	return string(b), nil
}

// long decodes LONG1's two's complement little-endian integer, at most 8
// bytes (what fits an int64).
func (u *unpickler) long(b []byte) (int64, error) {
	if len(b) > 8 {
		return 0, u.fail("an integer of %d bytes; this reader takes at most 8", len(b))
	}
	if len(b) == 0 {
		return 0, nil
	}
	var buf [8]byte
	if b[len(b)-1]&0x80 != 0 {
		buf = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	}
	copy(buf[:], b)
	return int64(binary.LittleEndian.Uint64(buf[:])), nil
}
