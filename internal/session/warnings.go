package session

import (
	"sync"

	"go.uber.org/zap"

	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// skipLogger counts skipped bad records and logs them: the first
// loggedSkips of each dataset, then every thousandth.
func skipLogger(log *zap.Logger, m *metrics) func(string, error) {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(dataset string, err error) {
		if c := m.datasets.counter(m.skipped, dataset); c != nil {
			c.Inc()
		}
		mu.Lock()
		seen[dataset]++
		n := seen[dataset]
		mu.Unlock()
		if n <= loggedSkips || n%1000 == 0 {
			log.Warn("bad record skipped", zap.String("dataset", dataset), zap.Int("skipped", n), zap.Error(err))
		}
	}
}

// wholeFileLogger warns, once per opened corpus and dataset, of compressed
// JSONL files whose header gives no usable size hint (each is one unit,
// tokenized whole into the cache, as large as the file's text), and of a
// compressed file cut across more than sharedFileShards logical shards
// (each decompresses it from its start to its part, per epoch and resume).
func wholeFileLogger(log *zap.Logger) func(*stream.Corpus) {
	return func(c *stream.Corpus) { warnCompressed(log, c.Compressed()) }
}

// warnCompressed logs what wholeFileLogger warns of, for the Compressed
// stats of one corpus.
func warnCompressed(log *zap.Logger, datasets map[string]stream.CompressedStats) {
	for name, st := range datasets {
		if st.Whole > 0 {
			log.Warn("compressed files without a usable size hint are read whole, one unit each",
				zap.String("dataset", name), zap.Uint64("files", st.Whole), zap.Uint64("compressed_files", st.Files))
		}
		if st.Ambiguous > 0 {
			log.Warn("gzip files hold so much text that their size is known only modulo 4 GiB: units are cut from a guess "+
				"and may be uneven (empty ones, or a large last one); split them below 4 GiB of text, or recompress them with zstd",
				zap.String("dataset", name), zap.Uint64("files", st.Ambiguous), zap.Uint64("compressed_files", st.Files))
		}
		if st.MaxWindow > largeWindow {
			log.Warn("zstd files ask for a large decoder window: every shard reading one holds a decoder of that size "+
				"(up to two per logical shard are kept); recompress them without --long, or prepare them with dataloaderd prepare",
				zap.String("dataset", name), zap.Uint64("window_bytes", st.MaxWindow), zap.Uint64("compressed_files", st.Files))
		}
		if st.MostShards > sharedFileShards {
			log.Warn("a compressed file is cut across many logical shards, each of which decompresses it from its start "+
				"to its part once per epoch and resume; split such files into smaller ones, or prepare them with dataloaderd prepare",
				zap.String("dataset", name), zap.Int("most_shards_per_file", st.MostShards), zap.Uint64("compressed_files", st.Files))
		}
	}
}

// largeWindow is the zstd decoder window above which the daemon warns: 16
// MiB, twice what zstd's highest regular level asks for.
const largeWindow = 16 << 20

// sharedFileShards is how many logical shards one compressed file may be cut
// across before the daemon warns (wholeFileLogger).
const sharedFileShards = 8

// loggedSkips is how many skipped records of a dataset are each logged.
const loggedSkips = 20
