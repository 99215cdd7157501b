package stream

// The order of units in a shard's epoch, and of lines in a shuffle window, is
// a keyed bijection on [0, n) computed on demand: a balanced Feistel network
// on the smallest even power of two >= n, walked until the result is < n.
// Nothing is stored, so memory is O(1) and there is nothing to build.

// mix is the splitmix64 finalizer: a cheap, well-distributed 64-bit hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// key derives a permutation key from its parts.
func key(parts ...uint64) uint64 {
	k := uint64(0x6a09e667f3bcc909)
	for _, p := range parts {
		k = mix(k ^ p)
	}
	return k
}

const feistelRounds = 4

// permute returns the image of i (< n) under the bijection on [0, n) keyed by k.
func permute(k, n, i uint64) uint64 {
	if n <= 1 {
		return i
	}
	bits := 0
	for (uint64(1) << bits) < n {
		bits++
	}
	half := (bits + 1) / 2
	mask := uint64(1)<<half - 1
	x := i
	for {
		l, r := x>>half, x&mask
		for round := uint64(0); round < feistelRounds; round++ {
			l, r = r, l^(mix(k^(round<<56)^r)&mask)
		}
		x = l<<half | r
		if x < n {
			return x
		}
	}
}
