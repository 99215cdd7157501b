package dcp

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestReadLoaderCheckpoint reads testdata/loader, written by DCP from two
// ranks (make_checkpoints.py): every entry listed with its kind, the
// loader's version and run part as the values they were, each cursor
// tensor whole, from whichever rank's file holds it, and the trainer's
// values beside them.
func TestReadLoaderCheckpoint(t *testing.T) {
	c, err := Open("testdata/loader")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fqns := c.FQNs()
	for _, want := range []string{"dataloader.version", "dataloader.run", "dataloader.shards.0.0", "dataloader.shards.1.3",
		"trainer.model.w", "trainer.optim.lr", "trainer.step"} {
		if !slices.Contains(fqns, want) {
			t.Errorf("no entry %q among %v", want, fqns)
		}
	}
	if e, _ := c.Entry("dataloader.shards.1.2"); e.Kind != "TensorStorageMetadata" || !reflect.DeepEqual(e.Size, []int64{6}) {
		t.Errorf("dataloader.shards.1.2: %+v", e)
	}
	if e, _ := c.Entry("dataloader.run"); e.Kind != "BytesStorageMetadata" {
		t.Errorf("dataloader.run: %+v", e)
	}
	v, err := c.Object("dataloader.version", 1<<20)
	if err != nil || v != int64(2) {
		t.Fatalf("version: %v, %v", v, err)
	}
	run, err := c.Object("dataloader.run", 1<<20)
	if b, ok := run.([]byte); err != nil || !ok || !strings.HasPrefix(string(b), `{"version": 3, "step": 57, "fingerprint": {"seq_len": 128`) {
		t.Fatalf("run: %v, %v", run, err)
	}
	for d := range 2 {
		for s := range 4 {
			fqn := "dataloader.shards." + string(rune('0'+d)) + "." + string(rune('0'+s))
			tn, err := c.Tensor(fqn, 1<<10)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tn.Int64s()
			want := []int64{int64(100*d + 10*s + 7), int64(d), int64(1000 + s), int64(2000 + d), int64(s % 3), 5}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %v, %v; want %v", fqn, got, err, want)
			}
		}
	}
	if lr, err := c.Object("trainer.optim.lr", 1<<10); err != nil || lr != 0.1 {
		t.Errorf("trainer.optim.lr: %v, %v", lr, err)
	}
	w, err := c.Tensor("trainer.model.w", 1<<10)
	if err != nil || w.DType != "float32" || !reflect.DeepEqual(w.Shape, []int64{4, 4}) || len(w.Storage) != 64 {
		t.Errorf("trainer.model.w: %+v, %v", w, err)
	}
	if _, err := w.Int64s(); err == nil {
		t.Error("a float32 matrix read as int64s")
	}
}
