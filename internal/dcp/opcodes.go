package dcp

import (
	"encoding/binary"
	"math"
	"strings"
)

// The opcodes this reader executes: what pickle.dump (protocols 2 to 5)
// writes for DCP's Metadata (dataclasses, dicts, tuples, torch.Size,
// dtypes as globals) and torch.save (protocol 2) for tensors and plain
// values. The text protocols' opcodes, sets, out-of-band buffers and
// NEWOBJ_EX are not among them and are refused.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opBinFloat       = 'G'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opNone           = 'N'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opBinUnicode     = 'X'
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opAppends        = 'e'
	opBinGet         = 'h'
	opLongBinGet     = 'j'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opSetItems       = 'u'
	opEmptyDict      = '}'
	opEmptyList      = ']'
	opEmptyTuple     = ')'
	opProto          = 0x80
	opNewObj         = 0x81
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opShortBinString = 0x8c // SHORT_BINUNICODE
	opBinUnicode8    = 0x8d
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
)

// step executes one opcode.
func (u *unpickler) step(op byte) error {
	switch op {
	case opProto:
		v, err := u.uint(1)
		if err == nil && (v < 2 || v > 5) {
			return u.fail("pickle protocol %d; this reader takes 2 to 5", v)
		}
		return err
	case opFrame: // a hint of the next frame's length: checked, then ignored
		n, err := u.uint(8)
		if err == nil && n > uint64(len(u.data)-u.pos) {
			return u.fail("a frame of %d bytes, %d are left", n, len(u.data)-u.pos)
		}
		return err
	case opStop:
		v, err := u.pop()
		if err != nil {
			return err
		}
		if len(u.stack) != 0 || len(u.marks) != 0 {
			return u.fail("STOP leaves %d values and %d marks behind", len(u.stack), len(u.marks))
		}
		u.result, u.done = v, true
		return nil
	case opMark:
		if len(u.marks) >= u.lim.Marks {
			return u.fail("MARKs nested more than %d deep", u.lim.Marks)
		}
		u.marks = append(u.marks, len(u.stack))
		return nil
	case opPop:
		_, err := u.pop()
		return err
	case opPopMark:
		_, err := u.popMark()
		return err
	case opDup:
		v, err := u.top()
		if err == nil {
			u.push(v)
		}
		return err
	}
	if handled, err := u.scalar(op); handled {
		return err
	}
	if handled, err := u.container(op); handled {
		return err
	}
	if handled, err := u.object(op); handled {
		return err
	}
	return u.memoOp(op)
}

// scalar executes the opcodes that push a constant read from the data.
func (u *unpickler) scalar(op byte) (bool, error) {
	var v any
	var err error
	switch op {
	case opNone:
		v = nil
	case opNewTrue, opNewFalse:
		v = op == opNewTrue
	case opBinInt1, opBinInt2:
		var n uint64
		n, err = u.uint(width(op))
		v = int64(n)
	case opBinInt:
		var n uint64
		n, err = u.uint(4)
		v = int64(int32(uint32(n)))
	case opLong1:
		var n uint64
		var b []byte
		if n, err = u.uint(1); err == nil {
			if b, err = u.read(n); err == nil {
				v, err = u.long(b)
			}
		}
	case opBinFloat:
		var b []byte
		b, err = u.read(8)
		if err == nil {
			v = math.Float64frombits(binary.BigEndian.Uint64(b))
		}
	case opShortBinString, opBinUnicode, opBinUnicode8:
		var n uint64
		if n, err = u.uint(width(op)); err == nil {
			v, err = u.text(n)
		}
	case opShortBinBytes, opBinBytes:
		var n uint64
		var b []byte
		if n, err = u.uint(width(op)); err == nil {
			b, err = u.read(n)
			v = append([]byte{}, b...)
		}
	default:
		return false, nil
	}
	if err == nil {
		u.push(v)
	}
	return true, err
}

// width is the size of the integer an opcode's argument starts with.
func width(op byte) int {
	switch op {
	case opBinInt2:
		return 2
	case opBinUnicode, opBinBytes:
		return 4
	case opBinUnicode8:
		return 8
	}
	return 1 // BININT1, SHORT_BINUNICODE, SHORT_BINBYTES
}

// memoOp executes the memo's opcodes; any opcode not handled before is
// refused here.
func (u *unpickler) memoOp(op byte) error {
	var idx uint64
	var err error
	switch op {
	case opMemoize:
		idx = uint64(len(u.memo))
	case opBinPut, opBinGet:
		idx, err = u.uint(1)
	case opLongBinPut, opLongBinGet:
		idx, err = u.uint(4)
	default:
		return u.fail("opcode 0x%02x (%q) is not one this reader executes", op, strings.TrimSpace(string(rune(op))))
	}
	if err != nil {
		return err
	}
	if op == opBinGet || op == opLongBinGet {
		if idx >= uint64(len(u.memo)) {
			return u.fail("memo entry %d was never stored", idx)
		}
		u.push(u.memo[idx])
		return nil
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	switch {
	case idx < uint64(len(u.memo)):
		u.memo[idx] = v
	case idx == uint64(len(u.memo)):
		u.memo = append(u.memo, v)
	default: // pickle numbers its memo from 0 without gaps
		return u.fail("memo entry %d stored with %d before it", idx, len(u.memo))
	}
	return nil
}
