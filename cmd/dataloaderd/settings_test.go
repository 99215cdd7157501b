package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the README's daemon flags table from settings()")

// TestSettingsTable: every field of daemonConfig is one row of settings(),
// whose key is the field's json tag (the config file's key), and no key or
// flag is declared twice.
func TestSettingsTable(t *testing.T) {
	var cfg daemonConfig
	base := reflect.ValueOf(&cfg).Elem()
	rowOf := map[string]string{} // field name -> key
	seen := map[string]bool{configFlag.flag: true}
	for _, s := range settings() {
		if seen[s.key] || seen["--"+s.flag] {
			t.Errorf("%s (--%s) declared twice", s.key, s.flag)
		}
		seen[s.key], seen["--"+s.flag] = true, true
		ptr := reflect.ValueOf(s.value.field(&cfg)).Pointer()
		found := false
		for i := 0; i < base.NumField(); i++ {
			if base.Field(i).Addr().Pointer() != ptr {
				continue
			}
			f := base.Type().Field(i)
			found = true
			if tag := f.Tag.Get("json"); tag != s.key {
				t.Errorf("row %s lands in %s, whose json key is %q", s.key, f.Name, tag)
			}
			if prev, dup := rowOf[f.Name]; dup {
				t.Errorf("rows %s and %s both land in %s", prev, s.key, f.Name)
			}
			rowOf[f.Name] = s.key
		}
		if !found {
			t.Errorf("row %s lands in no field of daemonConfig", s.key)
		}
		if s.help == "" || s.doc == "" || s.docDefault == "" {
			t.Errorf("row %s lacks its help, its README default or its README meaning", s.key)
		}
	}
	for i := 0; i < base.NumField(); i++ {
		if name := base.Type().Field(i).Name; rowOf[name] == "" {
			t.Errorf("daemonConfig.%s has no row in settings()", name)
		}
	}
}

// TestReadmeDaemonFlags: the README's "Daemon flags" table is the one
// settings() writes. A setting changed or added changes the README with it
// (go test ./cmd/dataloaderd -run TestReadmeDaemonFlags -update).
func TestReadmeDaemonFlags(t *testing.T) {
	const readme = "../../README.md"
	const begin, end = "<!-- daemon flags: begin", "<!-- daemon flags: end -->"
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no section between %q and %q", readme, begin, end)
	}
	i += strings.Index(text[i:], "\n") + 1 // past the begin line
	got, want := text[i:j], readmeTable(settings())
	if *update && got != want {
		text = text[:i] + want + text[j:]
		if err := os.WriteFile(readme, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		got = want
	}
	if got != want {
		g, w := firstDifference(got, want)
		t.Errorf("%s's daemon flags table differs from settings() (cmd/dataloaderd/settings_table.go); "+
			"run go test ./cmd/dataloaderd -run TestReadmeDaemonFlags -update\n got: %s\nwant: %s", readme, g, w)
	}
}

// firstDifference is the first line at which got and want differ, from each.
func firstDifference(got, want string) (string, string) {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return gl, wl
		}
	}
	return "", ""
}

// readmeTable is the README's table of the daemon's flags: one row a
// setting, in their order, then --config.
func readmeTable(rows []setting) string {
	var b strings.Builder
	b.WriteString("\n| flag | config key | default | meaning |\n|---|---|---|---|\n")
	for _, s := range rows {
		def := strings.ReplaceAll(s.docDefault, "{}", s.value.defaultText())
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", s.flag, s.key, def, s.doc)
	}
	fmt.Fprintf(&b, "| `--%s` | | | %s |\n\n", configFlag.flag, configFlag.doc)
	return b.String()
}

// TestEverySettingLayers: for every row, the config file's key and the
// flag land in the same field, the flag over the file over the default.
func TestEverySettingLayers(t *testing.T) {
	for _, s := range settings() {
		var file, flagArg string
		var fromFile, fromFlag any
		switch s.value.(type) {
		case intValue:
			file, flagArg, fromFile, fromFlag = "7", "9", 7, 9
		case durationValue:
			file, flagArg, fromFile, fromFlag = `"3s"`, "5s", "3s", "5s"
		case stringValue:
			file, flagArg, fromFile, fromFlag = `"a"`, "b", "a", "b"
		case boolValue:
			def := s.value.defaultText() == "true"
			file, flagArg, fromFile, fromFlag = fmt.Sprint(!def), fmt.Sprint(def), !def, def
		case listValue:
			file, flagArg, fromFile, fromFlag = `["a", "c"]`, "b", []string{"a", "c"}, []string{"b"}
		}
		path := writeFile(t, fmt.Sprintf(`{%q: %s}`, s.key, file))
		for _, c := range []struct {
			args []string
			want any
		}{
			{[]string{"--config", path}, fromFile},
			{[]string{"--config", path, "--" + s.flag + "=" + flagArg}, fromFlag},
		} {
			cfg, err := parseServe(c.args, io.Discard)
			if err != nil {
				t.Fatalf("%v: %v", c.args, err)
			}
			if got := reflect.ValueOf(s.value.field(&cfg)).Elem().Interface(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s, %v: got %v, want %v", s.key, c.args, got, c.want)
			}
		}
	}
}

// TestSettingChecks: each bad value is refused by daemonConfig.check with
// the message the daemon has always given, from the file as from the flag.
func TestSettingChecks(t *testing.T) {
	for _, c := range []struct{ key, flag, value, want string }{
		{"attach_within", "attach-within", "0s", `attach_within "0s": want a positive duration such as 1m`},
		{"stop_timeout", "stop-timeout", "-1s", `stop_timeout "-1s": want a positive duration such as 10s`},
		{"idle_limit", "idle-limit", "-1s", `idle_limit "-1s": want a duration such as 6h, or 0 for none`},
		{"object_retry_for", "object-retry-for", "0s", `object_retry_for "0s": want a positive duration such as 2m`},
		{"slots", "slots", "1", "slots must be in [2, 256], got 1"},
		{"max_sessions_per_user", "max-sessions-per-user", "0", "max_sessions_per_user must be at least 1, got 0"},
		{"ring_budget_mb", "ring-budget-mb", "-1", "ring_budget_mb must be >= 0 (0: derived from RAM and the shm directory), got -1"},
		{"memory_reserve_mb", "memory-reserve-mb", "-1", "memory_reserve_mb must be >= 0, got -1"},
		{"log_level", "log-level", "loud", `log_level "loud": want debug, info, warn or error`},
		{"tokenize_workers", "tokenize-workers", "4097", "tokenize_workers must be in [1, 4096], got 4097"},
		{"token_cache_mb", "token-cache-mb", "15", "token_cache_mb must be at least 16, got 15"},
		{"object_cache_disk_mb", "object-cache-disk-mb", "8", "object_cache_disk_mb must be at least 16, got 8"},
		{"object_block_kb", "object-block-kb", "6", "object_block_kb must be a multiple of 4 in [4, 262144], got 6"},
		{"object_concurrency", "object-concurrency", "1025", "object_concurrency must be in [1, 1024], got 1025"},
		{"object_path_style", "object-path-style", "maybe", `object_path_style "maybe": want auto, true or false`},
	} {
		quoted := c.value
		if _, err := strconv.Atoi(c.value); err != nil {
			quoted = fmt.Sprintf("%q", c.value)
		}
		for _, args := range [][]string{{"--" + c.flag, c.value}, {"--config", writeFile(t, fmt.Sprintf(`{%q: %s}`, c.key, quoted))}} {
			cfg, err := parseServe(args, io.Discard)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if _, err := cfg.check(); err == nil || err.Error() != c.want {
				t.Errorf("%v: got %v, want %q", args, err, c.want)
			}
		}
	}
}
