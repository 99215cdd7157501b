// Package testcorpus writes small corpora for tests: Megatron indexed
// datasets and flat token files whose every data token value is unique, so
// that tests can check exactly-once delivery by counting.
package testcorpus

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// Megatron writes docs as a Megatron indexed dataset (int32 tokens) at
// dir/name.{bin,idx} and returns the prefix.
func Megatron(t testing.TB, dir, name string, docs [][]int32) string {
	t.Helper()
	var bin, idx bytes.Buffer
	le := binary.LittleEndian
	idx.WriteString("MMIDIDX\x00\x00")
	binary.Write(&idx, le, uint64(1))
	idx.WriteByte(4) // int32
	binary.Write(&idx, le, uint64(len(docs)))
	binary.Write(&idx, le, uint64(len(docs)+1))
	var ptr int64
	ptrs := make([]int64, len(docs))
	for i, d := range docs {
		binary.Write(&idx, le, int32(len(d)))
		ptrs[i] = ptr
		ptr += int64(4 * len(d))
		binary.Write(&bin, le, d)
	}
	binary.Write(&idx, le, ptrs)
	for i := 0; i <= len(docs); i++ {
		binary.Write(&idx, le, int64(i))
	}
	prefix := filepath.Join(dir, name)
	if err := os.WriteFile(prefix+".bin", bin.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prefix+".idx", idx.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return prefix
}

// UniqueDocs makes n documents of random lengths in [1, maxLen] (a few up
// to six times longer) whose token values are first, first+1, ... (every
// value once), and returns them and the next unused value.
func UniqueDocs(rng *rand.Rand, n, maxLen int, first int32) ([][]int32, int32) {
	docs := make([][]int32, n)
	for i := range docs {
		l := 1 + rng.Intn(maxLen)
		if rng.Intn(10) == 0 {
			l = 1 + rng.Intn(maxLen*6)
		}
		d := make([]int32, l)
		for j := range d {
			d[j] = first
			first++
		}
		docs[i] = d
	}
	return docs, first
}

// Tokens writes a flat uint16 token file: each document followed by eos.
func Tokens(t testing.TB, path string, docs [][]int32, eos int32) {
	t.Helper()
	var b bytes.Buffer
	for _, d := range docs {
		for _, tok := range d {
			binary.Write(&b, binary.LittleEndian, uint16(tok))
		}
		binary.Write(&b, binary.LittleEndian, uint16(eos))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
