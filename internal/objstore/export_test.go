package objstore

// ChunksOf counts the chunks of o's block table that are made.
func ChunksOf(o *Object) int {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	return o.blocks.chunksMade()
}
