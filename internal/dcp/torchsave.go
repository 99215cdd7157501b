package dcp

import (
	"archive/zip"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"strings"
)

// itemLimits bound the pickle of one item torch.save wrote (a tensor's is
// about 150 bytes, a bytes object's its length and a few more).
var itemLimits = Limits{Ops: 1 << 16, Marks: 32}

// archive is what torch.save writes (its zip form): <prefix>/data.pkl, the
// pickle, beside <prefix>/data/<key>, the raw bytes of each storage it
// names, and <prefix>/byteorder.
type archive struct {
	name   string // for errors: the file and the item's place in it
	prefix string
	files  map[string]*zip.File
	big    bool // storages are big-endian
}

// openArchive reads the zip directory of torch.save's output, size bytes
// of r.
func openArchive(name string, r io.ReaderAt, size int64) (*archive, error) {
	z, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%s: not what torch.save writes (a zip archive): %v", name, err)
	}
	a := &archive{name: name, files: map[string]*zip.File{}}
	for _, f := range z.File {
		a.files[f.Name] = f
		dir, base := path.Split(f.Name)
		if base == "data.pkl" && dir != "" && !strings.Contains(dir[:len(dir)-1], "/") {
			if a.prefix != "" {
				return nil, fmt.Errorf("%s: two pickles, %sdata.pkl and %s/data.pkl", name, dir, a.prefix)
			}
			a.prefix = dir[:len(dir)-1]
		}
	}
	if a.prefix == "" {
		return nil, fmt.Errorf("%s: a zip archive without <name>/data.pkl: not what torch.save writes", name)
	}
	if _, ok := a.files[a.prefix+"/byteorder"]; ok {
		order, err := a.entry("byteorder", 16)
		if err != nil {
			return nil, err
		}
		switch string(order) {
		case "little":
		case "big":
			a.big = true
		default:
			return nil, fmt.Errorf("%s: byteorder %q, want little or big", name, order)
		}
	}
	return a, nil
}

// entry reads the archive's file <prefix>/rel, which must be stored (not
// compressed, as torch.save writes) and at most limit bytes.
func (a *archive) entry(rel string, limit int64) ([]byte, error) {
	name := a.prefix + "/" + rel
	f, ok := a.files[name]
	if !ok {
		return nil, fmt.Errorf("%s: no %s in the archive", a.name, name)
	}
	if f.Method != zip.Store {
		return nil, fmt.Errorf("%s: %s is compressed (method %d); torch.save stores its files", a.name, name, f.Method)
	}
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than the %d this reader takes", a.name, name, f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %v", a.name, name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %v", a.name, name, err)
	}
	if int64(len(b)) > limit || uint64(len(b)) != f.UncompressedSize64 {
		return nil, fmt.Errorf("%s: %s holds %d bytes, its header says %d", a.name, name, len(b), f.UncompressedSize64)
	}
	return b, nil
}

// object decodes the archive's pickle, of at most limit bytes.
func (a *archive) object(limit int64) (any, error) {
	b, err := a.entry("data.pkl", limit)
	if err != nil {
		return nil, err
	}
	return Unpickle(a.name+": "+a.prefix+"/data.pkl", b, itemLimits)
}

// Tensor is a tensor torch.save wrote, its storage read whole.
type Tensor struct {
	// DType is torch's name of the element type: "int64", "float32", ...
	DType  string
	Shape  []int64
	Stride []int64
	// Offset is the tensor's first element's index in Storage.
	Offset  int64
	Storage []byte
	// BigEndian says the storage's elements are big-endian.
	BigEndian bool
}

// storageTypes are the storage classes torch.save names, by element type
// and size.
var storageTypes = map[string]struct {
	dtype string
	size  int64
}{
	"LongStorage": {"int64", 8}, "IntStorage": {"int32", 4}, "ShortStorage": {"int16", 2},
	"CharStorage": {"int8", 1}, "ByteStorage": {"uint8", 1}, "BoolStorage": {"bool", 1},
	"DoubleStorage": {"float64", 8}, "FloatStorage": {"float32", 4}, "HalfStorage": {"float16", 2},
	"BFloat16Storage": {"bfloat16", 2},
}

// tensor decodes the archive as torch.save(tensor) writes it: the pickle
// is torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...),
// its storage a persistent id ("storage", class, key, location, numel)
// whose bytes are <prefix>/data/<key>, at most limit of them.
func (a *archive) tensor(limit int64) (Tensor, error) {
	v, err := a.object(1 << 20)
	if err != nil {
		return Tensor{}, err
	}
	o, ok := v.(*Object)
	if !ok || o.Class() != "torch._utils._rebuild_tensor_v2" || len(o.Args) < 4 {
		return Tensor{}, fmt.Errorf("%s: holds a %s, not a tensor as torch.save writes it (torch._utils._rebuild_tensor_v2 of 4 or more arguments)", a.name, kind(v))
	}
	pid, _ := o.Args[0].(PersistentID)
	id, _ := pid.ID.(Tuple)
	if len(id) != 5 || id[0] != "storage" {
		return Tensor{}, fmt.Errorf("%s: the tensor's storage is a %s, not a persistent id (storage, class, key, location, numel)", a.name, kind(o.Args[0]))
	}
	class, _ := id[1].(Global)
	st, known := storageTypes[class.Name]
	key, okKey := id[2].(string)
	numel, okNumel := id[4].(int64)
	if class.Module != "torch" || !known || !okKey || !okNumel || numel < 0 || strings.ContainsAny(key, "/\\") {
		return Tensor{}, fmt.Errorf("%s: a storage of %s, key %v, %v elements: not one this reader takes", a.name, kind(id[1]), id[2], id[4])
	}
	if numel > limit/st.size {
		return Tensor{}, fmt.Errorf("%s: a storage of %d elements of %s, more than the %d bytes this reader takes", a.name, numel, st.dtype, limit)
	}
	t := Tensor{DType: st.dtype, BigEndian: a.big}
	if t.Offset, ok = o.Args[1].(int64); !ok || t.Offset < 0 {
		return Tensor{}, fmt.Errorf("%s: the tensor's storage offset is %v", a.name, o.Args[1])
	}
	if t.Shape, err = ints(o.Args[2]); err != nil {
		return Tensor{}, fmt.Errorf("%s: the tensor's size: %v", a.name, err)
	}
	if t.Stride, err = ints(o.Args[3]); err != nil || len(t.Stride) != len(t.Shape) {
		return Tensor{}, fmt.Errorf("%s: the tensor's stride %v does not match its size %v", a.name, o.Args[3], t.Shape)
	}
	if last, empty := lastIndex(t); !empty && last >= numel {
		return Tensor{}, fmt.Errorf("%s: a tensor of size %v, stride %v at offset %d reaches element %d of a storage of %d",
			a.name, t.Shape, t.Stride, t.Offset, last, numel)
	}
	if t.Storage, err = a.entry("data/"+key, numel*st.size); err != nil {
		return Tensor{}, err
	}
	if int64(len(t.Storage)) != numel*st.size {
		return Tensor{}, fmt.Errorf("%s: storage %s holds %d bytes, not %d elements of %s", a.name, key, len(t.Storage), numel, st.dtype)
	}
	return t, nil
}

// ints reads a tuple of non-negative ints (torch.Size's or a plain tuple).
func ints(v any) ([]int64, error) {
	if o, ok := v.(*Object); ok && o.Class() == "torch.Size" && len(o.Args) == 1 {
		v = o.Args[0]
	}
	t, ok := v.(Tuple)
	if !ok || len(t) > 64 {
		return nil, fmt.Errorf("a %s, not a tuple of at most 64 ints", kind(v))
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 {
			return nil, fmt.Errorf("element %d is %v, not an int >= 0", i, x)
		}
		out[i] = n
	}
	return out, nil
}

// lastIndex is the index in the storage of the tensor's last element;
// empty when it has none. A size or stride past 2^40, or an index past
// 2^62, gives 2^62, past any storage this reader takes, so that nothing
// overflows.
func lastIndex(t Tensor) (int64, bool) {
	last := t.Offset
	for i, n := range t.Shape {
		if n == 0 {
			return 0, true
		}
		if t.Stride[i] > 1<<40 || n > 1<<40 {
			return 1 << 62, false
		}
		last += (n - 1) * t.Stride[i]
		if last > 1<<62 {
			return 1 << 62, false
		}
	}
	return last, false
}

// Int64s returns the elements of a one-dimensional int64 tensor.
func (t Tensor) Int64s() ([]int64, error) {
	if t.DType != "int64" || len(t.Shape) != 1 {
		return nil, fmt.Errorf("a %s tensor of size %v, not a one-dimensional int64 one", t.DType, t.Shape)
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if t.BigEndian {
		order = binary.BigEndian
	}
	out := make([]int64, t.Shape[0])
	for i := range out {
		at := (t.Offset + int64(i)*t.Stride[0]) * 8 // within the storage: checked when read
		out[i] = int64(order.Uint64(t.Storage[at : at+8]))
	}
	return out, nil
}
