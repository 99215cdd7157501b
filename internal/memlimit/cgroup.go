// Package memlimit finds the memory limit the kernel enforces on the daemon
// (the limit of its memory cgroup, v2 or v1) and fits the daemon's memory
// budgets within it (Fit). A daemon whose rings and caches together may
// take more than its cgroup allows is killed by the kernel's OOM killer,
// with every session of the node; so the budgets are checked against the
// limit at start, not discovered at the first full ring.
//
// It reads files only under a root directory ("/" in the daemon), so that
// tests lay out a cgroup tree of their own.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Limit is the memory limit of the daemon's cgroup.
type Limit struct {
	// Bytes is the limit; 0 when there is none (no cgroup, or "max").
	Bytes int64
	// File is the cgroup file that sets it (the lowest of the daemon's
	// cgroup and its ancestors), for messages.
	File string
}

func (l Limit) String() string {
	if l.Bytes == 0 {
		return "no memory limit"
	}
	return fmt.Sprintf("the memory limit of %s (%s)", MiB(l.Bytes), l.File)
}

// unlimited is the value at or above which a cgroup v1 limit means none
// (the kernel reports "no limit" as the largest page count in bytes,
// 9223372036854771712 on 4 KiB pages).
const unlimited = 1 << 62

// mount is a cgroup filesystem mounted in the daemon's mount namespace.
type mount struct {
	point string // where it is mounted
	root  string // the cgroup path mounted there ("/" unless bind-mounted)
}

// Read returns the memory limit of the cgroup the calling process is in,
// reading /proc/self/cgroup, /proc/self/mountinfo and the cgroup files
// under root. It takes the lowest limit of the process's cgroup and its
// ancestors (a parent's limit binds its children too), in the v2 hierarchy
// (memory.max) and the v1 memory hierarchy (memory.limit_in_bytes), either
// or both being mounted. No cgroup filesystem, or none that limits memory,
// is no limit and no error; a limit file that does not parse is an error
// naming it.
func Read(root string) (Limit, error) {
	groups, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, nil
	}
	if err != nil {
		return Limit{}, fmt.Errorf("memory limit: %w", err)
	}
	mountinfo, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, nil
	}
	if err != nil {
		return Limit{}, fmt.Errorf("memory limit: %w", err)
	}
	v2, v1 := mounts(mountinfo)
	var best Limit
	for _, line := range strings.Split(string(groups), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var m *mount
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "" && v2 != nil:
			m, file = v2, "memory.max"
		case hasController(parts[1], "memory") && v1 != nil:
			m, file = v1, "memory.limit_in_bytes"
		default:
			continue
		}
		l, err := lowest(root, m, parts[2], file)
		if err != nil {
			return Limit{}, err
		}
		if l.Bytes > 0 && (best.Bytes == 0 || l.Bytes < best.Bytes) {
			best = l
		}
	}
	return best, nil
}

// mounts finds the cgroup v2 mount and the v1 mount of the memory
// controller in a mountinfo file (proc(5)): mount ID, parent ID,
// major:minor, root, mount point, options, optional fields, "-", type,
// source, super options.
func mounts(mountinfo []byte) (v2, v1 *mount) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 {
			continue
		}
		m := &mount{point: unescape(fields[4]), root: unescape(fields[3])}
		switch {
		case tail[0] == "cgroup2" && v2 == nil:
			v2 = m
		case tail[0] == "cgroup" && len(tail) >= 3 && hasController(tail[2], "memory") && v1 == nil:
			v1 = m
		}
	}
	return v2, v1
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash (\040 and so on).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hasController reports whether a comma-separated list names c.
func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// lowest reads file in the directory of cgroup path cg under mount m and in
// each of its ancestors up to the mount's root, and returns the lowest
// limit found. A cgroup path outside the mount's root (a namespace or
// bind mount that shows another part of the tree) starts at the mount
// point itself: that is the process's own cgroup as this namespace sees it.
func lowest(root string, m *mount, cg, file string) (Limit, error) {
	cgPath, mountRoot := path.Clean("/"+cg), path.Clean("/"+m.root)
	rel := ""
	switch {
	case mountRoot == "/":
		rel = cgPath
	case cgPath == mountRoot || strings.HasPrefix(cgPath, mountRoot+"/"):
		rel = strings.TrimPrefix(cgPath, mountRoot)
	}
	top := filepath.Join(root, m.point)
	dir := filepath.Join(top, rel)
	if _, err := os.Stat(dir); err != nil {
		dir = top
	}
	var best Limit
	for {
		p := filepath.Join(dir, file)
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return Limit{}, fmt.Errorf("memory limit: %w", err)
		default:
			n, err := parseLimit(p, string(b))
			if err != nil {
				return Limit{}, err
			}
			if n > 0 && (best.Bytes == 0 || n < best.Bytes) {
				best = Limit{Bytes: n, File: strings.TrimPrefix(p, strings.TrimSuffix(root, "/"))}
			}
		}
		if dir == top || len(dir) <= len(top) {
			return best, nil
		}
		dir = filepath.Dir(dir)
	}
}

// parseLimit parses a memory.max or memory.limit_in_bytes value: bytes, or
// "max" (v2) or a value of 2^62 or more (v1) for none (0).
func parseLimit(file, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory limit: %s holds %q, not a byte count or \"max\"", file, s)
	}
	if n >= unlimited {
		return 0, nil
	}
	return int64(n), nil
}

// MiB formats a byte count for people.
func MiB(n int64) string {
	return fmt.Sprintf("%d MiB", n>>20)
}
