package dcp

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyFixture copies testdata/loader into a temporary folder, where a test
// may damage it.
func copyFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{MetadataFile, "__0_0.distcp", "__1_0.distcp"} {
		b, err := os.ReadFile(filepath.Join("testdata/loader", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// edit rewrites a file of the folder.
func edit(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointRefusesDamage: a checkpoint cut short, whose metadata
// names a file outside its folder, whose items are damaged, or larger than
// the reader is told to take, is refused with an error naming the file
// and what is wrong, and nothing panics.
func TestCheckpointRefusesDamage(t *testing.T) {
	open := func(dir string) error {
		c, err := Open(dir)
		if err == nil {
			c.Close()
		}
		return err
	}
	readShard := func(dir string) error {
		c, err := Open(dir)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Tensor("dataloader.shards.1.3", 1<<10)
		return err
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		read   func(dir string) error
		want   []string
	}{
		{"metadata cut short", func(t *testing.T, dir string) {
			edit(t, dir, MetadataFile, func(b []byte) []byte { return b[:len(b)/2] })
		}, open, []string{".metadata: pickle at byte 2: a frame of", "are left"}},
		{"metadata not a pickle", func(t *testing.T, dir string) {
			edit(t, dir, MetadataFile, func([]byte) []byte { return []byte("{\"json\": 1}") })
		}, open, []string{".metadata: pickle at byte 0: opcode 0x7b"}},
		{"metadata of another class", func(t *testing.T, dir string) {
			edit(t, dir, MetadataFile, func(b []byte) []byte {
				return bytes.Replace(b, []byte("\x8c\x08Metadata"), []byte("\x8c\x08Metadate"), 1)
			})
		}, open, []string{".metadata: a torch.distributed.checkpoint.metadata.Metadate object, not torch.distributed.checkpoint.metadata.Metadata"}},
		{"metadata too large", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, MetadataFile), MaxMetadataBytes+1); err != nil {
				t.Fatal(err)
			}
		}, open, []string{".metadata is more than 67108864 bytes"}},
		{"data file outside the folder", func(t *testing.T, dir string) {
			edit(t, dir, MetadataFile, func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("__1_0.distcp"), []byte("../1_0.distc")) })
		}, readShard, []string{`names the data file "../1_0.distc", not a file of the folder`}},
		{"data file missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "__1_0.distcp"))
		}, readShard, []string{"__1_0.distcp: no such file"}},
		{"data file cut short", func(t *testing.T, dir string) {
			edit(t, dir, "__1_0.distcp", func(b []byte) []byte { return b[:100] })
		}, readShard, []string{"__1_0.distcp (entry \"dataloader.shards.1.3\" at bytes", "the file is 100 bytes: cut short"}},
		{"item not a zip", func(t *testing.T, dir string) {
			edit(t, dir, "__1_0.distcp", func(b []byte) []byte { return bytes.Repeat([]byte{'x'}, len(b)) })
		}, readShard, []string{"__1_0.distcp (entry \"dataloader.shards.1.3\"", "not what torch.save writes (a zip archive)"}},
		{"item's storage damaged", func(t *testing.T, dir string) {
			edit(t, dir, "__1_0.distcp", func(b []byte) []byte {
				// every cursor's storage: its last byte, whose checksum then fails
				return bytes.ReplaceAll(b, []byte{5, 0, 0, 0, 0, 0, 0, 0, 'P', 'K'}, []byte{6, 0, 0, 0, 0, 0, 0, 0, 'P', 'K'})
			})
		}, readShard, []string{"archive/data/0: zip: checksum error"}},
		{"item's pickle damaged", func(t *testing.T, dir string) {
			edit(t, dir, "__1_0.distcp", func(b []byte) []byte {
				return bytes.ReplaceAll(b, []byte("_rebuild_tensor_v2"), []byte("_rebuild_tensor_v9"))
			})
		}, readShard, []string{"archive/data.pkl: zip: checksum error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t)
			tc.damage(t, dir)
			err := tc.read(dir)
			if err == nil {
				t.Fatal("read a damaged checkpoint")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nsays no %q", err, w)
				}
			}
		})
	}
}

// TestCheckpointLimits: an item larger than the caller takes is refused
// before its bytes are read; an entry read as the wrong kind says so.
func TestCheckpointLimits(t *testing.T) {
	c, err := Open("testdata/loader")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Tensor("dataloader.shards.0.0", 40); err == nil || !strings.Contains(err.Error(), "a storage of 6 elements of int64, more than the 40 bytes this reader takes") {
		t.Errorf("a storage past the limit: %v", err)
	}
	if _, err := c.Object("dataloader.run", 64); err == nil || !strings.Contains(err.Error(), "archive/data.pkl is") {
		t.Errorf("a pickle past the limit: %v", err)
	}
	if _, err := c.Tensor("dataloader.run", 1<<10); err == nil || !strings.Contains(err.Error(), `entry "dataloader.run" is a BytesStorageMetadata, not a TensorStorageMetadata`) {
		t.Errorf("bytes read as a tensor: %v", err)
	}
	if _, err := c.Object("nothing.here", 1<<10); err == nil || !strings.Contains(err.Error(), `has no entry "nothing.here"`) {
		t.Errorf("a missing entry: %v", err)
	}
}

// FuzzArchive: no bytes make the reader of torch.save's archive panic;
// the seed is a cursor as the fixture holds it.
func FuzzArchive(f *testing.F) {
	c, err := Open("testdata/loader")
	if err != nil {
		f.Fatal(err)
	}
	it := c.items["dataloader.shards.0.0"][0]
	b, err := os.ReadFile(filepath.Join("testdata/loader", it.file))
	c.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[it.offset : it.offset+it.length])
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := openArchive("fuzz", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if tn, err := a.tensor(1 << 12); err == nil {
			tn.Int64s() //nolint:errcheck // any error is fine; a panic is not
		}
	})
}
