package dcp

import "fmt"

// The opcodes that build containers and objects, and the values they make.

// smallDict is the most entries a Dict holds without an index: the fields
// of a dataclass are searched in place, the entries of a state dict by it.
const smallDict = 16

// find is the position of a string or int key.
func (d *Dict) find(k any) (int, bool) {
	if d.index != nil {
		i, ok := d.index[k]
		return i, ok
	}
	for i, x := range d.Keys {
		if x == k {
			return i, true
		}
	}
	return 0, false
}

// container executes the opcodes that build tuples, lists and dicts.
func (u *unpickler) container(op byte) (bool, error) {
	switch op {
	case opEmptyTuple:
		u.push(Tuple{})
	case opTuple1, opTuple2, opTuple3:
		t, err := u.popN(int(op-opTuple1) + 1)
		if err != nil {
			return true, err
		}
		u.push(t)
	case opTuple:
		items, err := u.popMark()
		if err != nil {
			return true, err
		}
		u.push(Tuple(items))
	case opEmptyList:
		u.push(&List{})
	case opEmptyDict:
		u.push(&Dict{})
	case opAppend, opAppends:
		var items []any
		var err error
		if op == opAppend {
			items, err = u.popN(1)
		} else {
			items, err = u.popMark()
		}
		if err != nil {
			return true, err
		}
		v, err := u.top()
		if err != nil {
			return true, err
		}
		l, ok := v.(*List)
		if !ok {
			return true, u.fail("APPEND to a %s, not a list", kind(v))
		}
		l.Items = append(l.Items, items...)
	case opSetItem, opSetItems:
		return true, u.setItems(op)
	default:
		return false, nil
	}
	return true, nil
}

// setItems executes SETITEM and SETITEMS: key, value pairs into the dict
// below them (a key given again replaces its value, as in Python, when it
// is a string or an int).
func (u *unpickler) setItems(op byte) error {
	var kv []any
	var err error
	if op == opSetItem {
		kv, err = u.popN(2)
	} else {
		kv, err = u.popMark()
	}
	if err != nil {
		return err
	}
	if len(kv)%2 != 0 {
		return u.fail("SETITEMS with an odd number (%d) of keys and values", len(kv))
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	d, ok := v.(*Dict)
	if !ok {
		return u.fail("SETITEM into a %s, not a dict", kind(v))
	}
	for i := 0; i < len(kv); i += 2 {
		d.set(kv[i], kv[i+1])
	}
	return nil
}

// set sets a key; a string or int key already there has its value
// replaced, as in Python (keys of other types are kept apart).
func (d *Dict) set(k, v any) {
	switch k.(type) {
	case string, int64:
		if i, ok := d.find(k); ok {
			d.Values[i] = v
			return
		}
		if d.index != nil {
			d.index[k] = len(d.Keys)
		}
	}
	d.Keys, d.Values = append(d.Keys, k), append(d.Values, v)
	if d.index == nil && len(d.Keys) > smallDict { // a dict of many entries is indexed
		d.index = make(map[any]int, len(d.Keys))
		for i, k := range d.Keys {
			switch k.(type) {
			case string, int64:
				if _, dup := d.index[k]; !dup {
					d.index[k] = i
				}
			}
		}
	}
}

// object executes the opcodes that name globals and build objects.
func (u *unpickler) object(op byte) (bool, error) {
	switch op {
	case opGlobal:
		mod, err := u.line()
		if err != nil {
			return true, err
		}
		name, err := u.line()
		if err != nil {
			return true, err
		}
		u.push(Global{Module: mod, Name: name})
	case opStackGlobal:
		t, err := u.popN(2)
		if err != nil {
			return true, err
		}
		mod, ok1 := t[0].(string)
		name, ok2 := t[1].(string)
		if !ok1 || !ok2 {
			return true, u.fail("STACK_GLOBAL of a %s and a %s, not two strings", kind(t[0]), kind(t[1]))
		}
		u.push(Global{Module: mod, Name: name})
	case opReduce, opNewObj:
		t, err := u.popN(2)
		if err != nil {
			return true, err
		}
		args, ok := t[1].(Tuple)
		if !ok {
			return true, u.fail("arguments that are a %s, not a tuple", kind(t[1]))
		}
		v, err := u.made(t[0], args, op == opReduce)
		if err != nil {
			return true, err
		}
		u.push(v)
	case opBuild:
		state, err := u.pop()
		if err != nil {
			return true, err
		}
		v, err := u.top()
		if err != nil {
			return true, err
		}
		o, ok := v.(*Object)
		if !ok || o.State != nil {
			return true, u.fail("BUILD of a %s (an object built once)", kind(v))
		}
		o.State = state
	case opBinPersID:
		id, err := u.pop()
		if err != nil {
			return true, err
		}
		u.push(PersistentID{ID: id})
	default:
		return false, nil
	}
	return true, nil
}

// made is what REDUCE (or NEWOBJ) of callable on args leaves: the bytes
// and ordered dicts protocol 2 spells as calls, otherwise an Object.
func (u *unpickler) made(callable any, args Tuple, reduce bool) (any, error) {
	g, _ := callable.(Global)
	switch {
	case reduce && g == (Global{"_codecs", "encode"}) && len(args) == 2 && args[1] == "latin1":
		s, ok := args[0].(string)
		if !ok {
			return nil, u.fail("_codecs.encode of a %s", kind(args[0]))
		}
		b := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 0xff {
				return nil, u.fail("_codecs.encode(%q..., latin1) of a character past latin1", s[:min(len(s), 16)])
			}
			b = append(b, byte(r))
		}
		return b, nil
	case reduce && (g == Global{"__builtin__", "bytes"} || g == Global{"builtins", "bytes"}) && len(args) == 0:
		return []byte{}, nil
	case reduce && g == Global{"collections", "OrderedDict"} && len(args) == 0:
		return &Dict{}, nil
	}
	if _, ok := callable.(Global); !ok {
		return nil, u.fail("a call of a %s, not of a class or function named by a global", kind(callable))
	}
	return &Object{Callable: callable, Args: args}, nil
}

// kind names a value's type as Python would, for errors.
func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	case Global:
		return "global " + v.Module + "." + v.Name
	case *Object:
		return v.Class() + " object"
	case PersistentID:
		return "persistent id"
	}
	return fmt.Sprintf("%T", v)
}
