package main

import (
	"runtime/debug"
)

// version is what `make build` stamps with -ldflags "-X main.version=...":
// the git describe of the checkout it built. Empty in a plain `go build` or
// `go test`, where versionString falls back on what Go recorded.
var version string

// versionString is the version `dataloaderd version` prints and the daemon
// logs: the stamped version, else the VCS revision Go embeds in a binary
// built inside a checkout, else "dev".
func versionString() string {
	info, _ := debug.ReadBuildInfo()
	return versionFrom(version, info)
}

// versionFrom is versionString over a stamped version and the build's
// information (nil when there is none): the stamp wins; then the commit
// (12 hex digits, as git abbreviates long hashes) with "-dirty" when the
// tree had uncommitted changes; then "dev".
func versionFrom(stamped string, info *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if info == nil {
		return "dev"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
