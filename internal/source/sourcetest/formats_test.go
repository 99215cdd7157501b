package sourcetest_test

import (
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/dataloaderd/dataloaderd/internal/files"
	"github.com/dataloaderd/dataloaderd/internal/source"
	"github.com/dataloaderd/dataloaderd/internal/source/sourcetest"
	"github.com/dataloaderd/dataloaderd/internal/testcorpus"
	"github.com/dataloaderd/dataloaderd/internal/text"
)

// eos ends documents in the units of delimited sources; no document holds it.
const eos = 0

// documents are the same documents for every format, written as two files,
// "a" and "b": unique token values from 1, so that any token out of place
// shows.
func documents() (a, b [][]int32) {
	docs, _ := testcorpus.UniqueDocs(rand.New(rand.NewSource(7)), 41, 24, 1)
	return docs[:17], docs[17:]
}

// writer writes one file of documents into dir under the name base and
// returns the paths Files must list for it.
type writer func(t *testing.T, dir, base string, docs [][]int32) []string

// corpus writes the documents with write into a new directory and opens it.
func corpus(t *testing.T, write writer, open func(dir string) (source.Source, error)) sourcetest.Corpus {
	dir := t.TempDir()
	a, b := documents()
	paths := append(write(t, dir, "a", a), write(t, dir, "b", b)...)
	src, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return sourcetest.Corpus{Source: src, Docs: append(a, b...), EOS: eos, Files: paths}
}

func TestTokenFormats(t *testing.T) {
	for _, f := range []struct {
		format string
		spec   source.Spec
		write  writer
	}{
		{files.Megatron, source.Spec{}, func(t *testing.T, dir, base string, docs [][]int32) []string {
			prefix := testcorpus.Megatron(t, dir, base, docs)
			return []string{prefix + ".bin", prefix + ".idx"}
		}},
		{files.Tokens, source.Spec{EOS: eos, BlockTokens: 16}, func(t *testing.T, dir, base string, docs [][]int32) []string {
			path := filepath.Join(dir, base+".bin")
			testcorpus.Tokens(t, path, docs, eos)
			return []string{path}
		}},
		{files.Arrow, source.Spec{}, func(t *testing.T, dir, base string, docs [][]int32) []string {
			return []string{testcorpus.Arrow(t, dir, base, docs, 3)}
		}},
	} {
		t.Run(f.format, func(t *testing.T) {
			sourcetest.Run(t, func(t *testing.T) sourcetest.Corpus {
				return corpus(t, f.write, func(dir string) (source.Source, error) {
					spec := f.spec
					spec.Name, spec.Path, spec.Format = f.format, dir, f.format
					return source.Open(spec)
				})
			})
		})
	}
}

func TestTextFormats(t *testing.T) {
	jsonl := func(ext string, c testcorpus.Compression) writer {
		return func(t *testing.T, dir, base string, docs [][]int32) []string {
			path := filepath.Join(dir, base+ext)
			testcorpus.JSONL(t, path, docs, c)
			return []string{path}
		}
	}
	for _, f := range []struct {
		name, format string
		write        writer
	}{
		{"jsonl", files.JSONL, jsonl(".jsonl", testcorpus.Plain)},
		{"jsonl.gz", files.JSONL, jsonl(".jsonl.gz", testcorpus.Gzip)},
		{"jsonl.zst", files.JSONL, jsonl(".ndjson.zst", testcorpus.Zstd)},
		{"parquet", files.Parquet, func(t *testing.T, dir, base string, docs [][]int32) []string {
			path := filepath.Join(dir, base+".parquet")
			testcorpus.Parquet(t, path, docs, 3)
			return []string{path}
		}},
	} {
		t.Run(f.name, func(t *testing.T) {
			sourcetest.Run(t, func(t *testing.T) sourcetest.Corpus {
				c := corpus(t, f.write, func(dir string) (source.Source, error) {
					// Small blocks: several units per JSONL file.
					ds, err := text.Open(text.Spec{Name: f.name, Path: dir, Format: f.format, BlockBytes: 64})
					if err != nil {
						return nil, err
					}
					return text.Tokenized(ds, testcorpus.Ints{}, text.Framing{EOS: eos}, text.NewCache(1<<20), nil), nil
				})
				c.Estimated = true
				return c
			})
		})
	}
}
