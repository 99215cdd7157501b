package dcp

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// metadataModule is the module of DCP's Metadata and its entries' classes.
const metadataModule = "torch.distributed.checkpoint.metadata"

// readMetadata reads .metadata: Metadata's state_dict_metadata (each
// entry by name: TensorStorageMetadata or BytesStorageMetadata) and its
// storage_data (MetadataIndex -> _StorageInfo: the file, offset and length
// of each piece).
func (c *Checkpoint) readMetadata() error {
	name := filepath.Join(c.dir, MetadataFile)
	f, err := c.root.Open(MetadataFile)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", c.dir, err)
	}
	defer f.Close()
	var b []byte
	fi, err := f.Stat()
	if err == nil && fi.Size() <= MaxMetadataBytes { // and not grown past it while read
		b, err = io.ReadAll(io.LimitReader(f, MaxMetadataBytes+1))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if fi.Size() > MaxMetadataBytes || len(b) > MaxMetadataBytes {
		return fmt.Errorf("%s is more than %d bytes (%d MiB), the most this reader takes", name, MaxMetadataBytes, MaxMetadataBytes>>20)
	}
	v, err := Unpickle(name, b, metadataLimits)
	if err != nil {
		return err
	}
	md, err := fields(v, metadataModule+".Metadata")
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	if err := c.readEntries(md); err != nil {
		return fmt.Errorf("%s: state_dict_metadata: %v", name, err)
	}
	if err := c.readItems(md); err != nil {
		return fmt.Errorf("%s: storage_data: %v", name, err)
	}
	return nil
}

// fields is the state (a dict of its fields) of a dataclass object of the
// class named class ("" for any class).
func fields(v any, class string) (*Dict, error) {
	o, ok := v.(*Object)
	if !ok || (class != "" && o.Class() != class) {
		want := class
		if want == "" {
			want = "an object"
		}
		return nil, fmt.Errorf("a %s, not %s", kind(v), want)
	}
	d, ok := o.State.(*Dict)
	if !ok {
		return nil, fmt.Errorf("a %s whose state is a %s, not a dict of its fields", o.Class(), kind(o.State))
	}
	return d, nil
}

// dictField is the dict under key of a dataclass's fields.
func dictField(d *Dict, key string) (*Dict, error) {
	v, _ := d.Get(key)
	out, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, not a dict", key, kind(v))
	}
	return out, nil
}

func (c *Checkpoint) readEntries(md *Dict) error {
	sdm, err := dictField(md, "state_dict_metadata")
	if err != nil {
		return err
	}
	for i, k := range sdm.Keys {
		fqn, ok := k.(string)
		if !ok {
			return fmt.Errorf("a key that is a %s, not a name", kind(k))
		}
		o, ok := sdm.Values[i].(*Object)
		if !ok || !strings.HasPrefix(o.Class(), metadataModule+".") {
			return fmt.Errorf("%q is a %s, not one of %s's classes", fqn, kind(sdm.Values[i]), metadataModule)
		}
		e := Entry{FQN: fqn, Kind: strings.TrimPrefix(o.Class(), metadataModule+".")}
		if e.Kind == "TensorStorageMetadata" {
			st, err := fields(o, "")
			if err != nil {
				return fmt.Errorf("%q: %v", fqn, err)
			}
			size, _ := st.Get("size")
			if e.Size, err = ints(size); err != nil {
				return fmt.Errorf("%q: size: %v", fqn, err)
			}
		}
		c.entries[fqn] = e
	}
	return nil
}

func (c *Checkpoint) readItems(md *Dict) error {
	sd, err := dictField(md, "storage_data")
	if err != nil {
		return err
	}
	for i, k := range sd.Keys {
		index, err := fields(k, metadataModule+".MetadataIndex")
		if err != nil {
			return fmt.Errorf("key %d: %v", i, err)
		}
		fqnv, _ := index.Get("fqn")
		fqn, ok := fqnv.(string)
		if !ok {
			return fmt.Errorf("key %d: fqn is a %s", i, kind(fqnv))
		}
		if _, ok := c.entries[fqn]; !ok {
			return fmt.Errorf("%q is stored but not listed in state_dict_metadata", fqn)
		}
		it, err := storageInfo(sd.Values[i])
		if err != nil {
			return fmt.Errorf("%q: %v", fqn, err)
		}
		c.items[fqn] = append(c.items[fqn], it)
	}
	return nil
}

// storageInfo reads a _StorageInfo: relative_path, offset, length and,
// when not None, transform_descriptors.
func storageInfo(v any) (item, error) {
	st, err := fields(v, "torch.distributed.checkpoint.filesystem._StorageInfo")
	if err != nil {
		return item{}, err
	}
	var it item
	p, _ := st.Get("relative_path")
	off, _ := st.Get("offset")
	n, _ := st.Get("length")
	var ok1, ok2, ok3 bool
	it.file, ok1 = p.(string)
	it.offset, ok2 = off.(int64)
	it.length, ok3 = n.(int64)
	if !ok1 || !ok2 || !ok3 || it.offset < 0 || it.length < 0 {
		return item{}, fmt.Errorf("relative_path %v, offset %v, length %v: not a file name and two counts", p, off, n)
	}
	switch td, _ := st.Get("transform_descriptors"); td := td.(type) {
	case nil:
	case *List:
		for _, x := range td.Items {
			s, ok := x.(string)
			if !ok {
				return item{}, fmt.Errorf("transform_descriptors holds a %s", kind(x))
			}
			it.transforms = append(it.transforms, s)
		}
	case Tuple:
		for _, x := range td {
			it.transforms = append(it.transforms, fmt.Sprint(x))
		}
	default:
		return item{}, fmt.Errorf("transform_descriptors is a %s", kind(td))
	}
	return it, nil
}
