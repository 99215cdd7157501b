package memlimit

import (
	"errors"
	"strings"
	"testing"
)

const mb = 1 << 20

func budgets(ring, token, object int64, set ...string) []Budget {
	isSet := func(f string) bool {
		for _, s := range set {
			if s == f {
				return true
			}
		}
		return false
	}
	bs := []Budget{
		{Flag: "--ring-budget-mb", Bytes: ring * mb},
		{Flag: "--token-cache-mb", Bytes: token * mb},
		{Flag: "--object-cache-mb", Bytes: object * mb},
	}
	for i := range bs {
		bs[i].Default, bs[i].Min = !isSet(bs[i].Flag), 16*mb
	}
	return bs
}

func sum(bs []Budget) int64 {
	var n int64
	for _, b := range bs {
		n += b.Bytes
	}
	return n
}

// TestFit: the decision of budgets against the limit. Budgets set by the
// operator are kept or refused, never changed; defaults are lowered to fit
// what is left; no limit changes nothing.
func TestFit(t *testing.T) {
	gib := Limit{Bytes: 1 << 30, File: "/sys/fs/cgroup/x/memory.max"}
	const reserve = 256 * mb

	t.Run("no limit", func(t *testing.T) {
		in := budgets(12000, 1024, 2048)
		out, lowered, err := Fit(Limit{}, reserve, "--memory-reserve-mb", in)
		if err != nil || len(lowered) > 0 || sum(out) != sum(in) {
			t.Fatalf("Fit without a limit: %v %v %v", out, lowered, err)
		}
	})
	t.Run("set budgets over the limit are refused by name", func(t *testing.T) {
		// Issue 23's deploy/kubernetes-sidecar.yaml: 6,144 MiB of rings
		// under a 4 GiB limit.
		_, _, err := Fit(Limit{Bytes: 4 << 30, File: "memory.max"}, reserve, "--memory-reserve-mb", budgets(6144, 1024, 2048, "--ring-budget-mb"))
		if !errors.Is(err, ErrOverLimit) {
			t.Fatalf("6 GiB of rings under 4 GiB: %v", err)
		}
		for _, want := range []string{"--ring-budget-mb 6144 MiB", "--memory-reserve-mb", "4096 MiB", "memory.max"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
	t.Run("defaults are lowered to fit, set ones kept", func(t *testing.T) {
		in := budgets(256, 1024, 2048, "--ring-budget-mb")
		out, lowered, err := Fit(gib, reserve, "--memory-reserve-mb", in)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Bytes != 256*mb {
			t.Fatalf("the ring budget set to 256 MiB became %d", out[0].Bytes>>20)
		}
		if sum(out)+reserve > gib.Bytes {
			t.Fatalf("budgets %d MiB + reserve exceed the limit", sum(out)>>20)
		}
		if len(lowered) != 2 || !strings.Contains(lowered[0], "--token-cache-mb lowered from its default of 1024 MiB") {
			t.Fatalf("lowered: %q", lowered)
		}
		// In proportion to their defaults: the object cache twice the token cache.
		if r := float64(out[2].Bytes) / float64(out[1].Bytes); r < 1.95 || r > 2.05 {
			t.Fatalf("token %d MiB, object %d MiB", out[1].Bytes>>20, out[2].Bytes>>20)
		}
	})
	t.Run("defaults that fit stay", func(t *testing.T) {
		in := budgets(1024, 1024, 512)
		out, lowered, err := Fit(Limit{Bytes: 8 << 30}, reserve, "--memory-reserve-mb", in)
		if err != nil || len(lowered) > 0 || sum(out) != sum(in) {
			t.Fatalf("%v %v %v", out, lowered, err)
		}
	})
	t.Run("not even the least fits", func(t *testing.T) {
		_, _, err := Fit(Limit{Bytes: 300 * mb}, reserve, "--memory-reserve-mb", budgets(1024, 1024, 2048))
		if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "less than their least") {
			t.Fatalf("three budgets of at least 16 MiB in 44 MiB: %v", err)
		}
	})
	t.Run("reserve over the limit", func(t *testing.T) {
		_, _, err := Fit(Limit{Bytes: 200 * mb}, reserve, "--memory-reserve-mb", budgets(1, 16, 16))
		if !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "--memory-reserve-mb") {
			t.Fatalf("a reserve of 256 MiB in 200 MiB: %v", err)
		}
	})
}
