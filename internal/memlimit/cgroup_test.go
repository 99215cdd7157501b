package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path under root: contents) into a new temp root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	// A cgroup v2 host: the unified hierarchy at /sys/fs/cgroup.
	v2Mounts = "24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n" +
		"25 30 0:5 / /proc rw,nosuid - proc proc rw\n"
	// A hybrid host (this project's test machine): v1 controllers, the
	// memory one among them, and an empty v2 hierarchy at unified/.
	hybridMounts = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	v1Unlimited = "9223372036854771712\n"
)

func TestRead(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  int64
		file  string
	}{
		{"v2 own limit", map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"proc/self/mountinfo":                        v2Mounts,
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "1073741824\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":     "max\n",
		}, 1 << 30, "/sys/fs/cgroup/kubepods/pod1/ctr/memory.max"},
		{"v2 parent lower", map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"proc/self/mountinfo":                        v2Mounts,
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":     "536870912\n",
		}, 512 << 20, "/sys/fs/cgroup/kubepods/pod1/memory.max"},
		{"v2 max is none", map[string]string{
			"proc/self/cgroup":                    "0::/user.slice\n",
			"proc/self/mountinfo":                 v2Mounts,
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		}, 0, ""},
		{"v2 namespaced: the mount is the own cgroup", map[string]string{
			// A container with its own cgroup namespace sees "/" and its
			// cgroup at the mount point.
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      v2Mounts,
			"sys/fs/cgroup/memory.max": "2147483648\n",
		}, 2 << 30, "/sys/fs/cgroup/memory.max"},
		{"v2 path outside the mount's root", map[string]string{
			// A container without a cgroup namespace whose /sys/fs/cgroup
			// is its own cgroup, bind-mounted: the path is the host's.
			"proc/self/cgroup":         "0::/system.slice/docker-abc.scope\n",
			"proc/self/mountinfo":      "24 30 0:22 /system.slice/docker-abc.scope /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory.max": "268435456\n",
		}, 256 << 20, "/sys/fs/cgroup/memory.max"},
		{"v1 memory", map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n",
			"proc/self/mountinfo": hybridMounts,
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": "1073741824\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":     v1Unlimited,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                 v1Unlimited,
		}, 1 << 30, "/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes"},
		{"v1 unlimited, v2 without the memory controller", map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/abc\n0::/\n",
			"proc/self/mountinfo": hybridMounts,
			"sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": v1Unlimited,
			"sys/fs/cgroup/unified/cgroup.controllers":                   "hugetlb\n",
		}, 0, ""},
		{"v1 and v2 both limit: the lower", map[string]string{
			"proc/self/cgroup":                             "4:memory:/a\n0::/b\n",
			"proc/self/mountinfo":                          hybridMounts,
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "3221225472\n",
			"sys/fs/cgroup/unified/b/memory.max":           "2147483648\n",
		}, 2 << 30, "/sys/fs/cgroup/unified/b/memory.max"},
		{"mount point with a space", map[string]string{
			"proc/self/cgroup":     "0::/x\n",
			"proc/self/mountinfo":  "24 30 0:22 / /cg\\040root rw - cgroup2 cgroup2 rw\n",
			"cg root/x/memory.max": "1048576000\n",
		}, 1048576000, "/cg root/x/memory.max"},
		{"no cgroup files", map[string]string{}, 0, ""},
		{"no cgroup mounted", map[string]string{
			"proc/self/cgroup":    "0::/\n",
			"proc/self/mountinfo": "25 30 0:5 / /proc rw,nosuid - proc proc rw\n",
		}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Read(tree(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			if got.Bytes != c.want || got.File != c.file {
				t.Fatalf("Read = %d from %q, want %d from %q", got.Bytes, got.File, c.want, c.file)
			}
		})
	}
}

// TestReadBadValue: a limit file that does not parse is an error naming it,
// not a limit of 0 (none) that would let the budgets pass it.
func TestReadBadValue(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/self/cgroup":           "0::/x\n",
		"proc/self/mountinfo":        v2Mounts,
		"sys/fs/cgroup/x/memory.max": "lots\n",
	})
	_, err := Read(root)
	if err == nil || !strings.Contains(err.Error(), "/sys/fs/cgroup/x/memory.max") || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("Read of a bad memory.max: %v", err)
	}
}

// TestReadSelf reads this process's own limit: whatever the machine, it
// must parse (this machine's cgroup files are real ones).
func TestReadSelf(t *testing.T) {
	l, err := Read("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this process: %v", l)
}
