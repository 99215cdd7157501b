package server_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/server"
	"github.com/dataloaderd/dataloaderd/internal/state"
)

// TestShardFromCursor: a cursor as the client's state dict holds it (the
// values of ShardState after its key, in the message's order) is the shard
// state with each field in its place; a cursor of another length, or a
// negative value, is refused naming the fields.
func TestShardFromCursor(t *testing.T) {
	if got := server.CursorFields(); !reflect.DeepEqual(got, []string{"lines", "epoch", "pos", "offset", "taken", "base"}) {
		t.Fatalf("CursorFields: %v", got)
	}
	got, err := server.ShardFromCursor([]int64{1, 2, 3, 4, 5, 6})
	want := state.Shard{Lines: 1, Window: state.Cursor{Epoch: 2, Pos: 3, Offset: 4}, Taken: 5, Base: 6}
	if err != nil || got != want {
		t.Fatalf("ShardFromCursor: %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range [][]int64{{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6, 7}, {1, 2, -3, 4, 5, 6}} {
		_, err := server.ShardFromCursor(bad)
		if !errors.Is(err, state.ErrMismatch) || !strings.Contains(err.Error(), "shard cursor") {
			t.Errorf("cursor %v: %v", bad, err)
		}
	}
}
