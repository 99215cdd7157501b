package objstore

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestParseContentRange(t *testing.T) {
	for _, c := range []struct {
		in                 string
		first, last, total int64
		ok                 bool
	}{
		{"bytes 0-4095/8192", 0, 4095, 8192, true},
		{"bytes 4096-4096/4097", 4096, 4096, 4097, true},
		{"bytes 0-4095/*", 0, 0, 0, false},
		{"bytes */8192", 0, 0, 0, false},
		{"bytes 10-5/100", 0, 0, 0, false},
		{"bytes 0-99/99", 0, 0, 0, false},
		{"bytes -1-5/100", 0, 0, 0, false},
		{"items 0-1/2", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		first, last, total, ok := parseContentRange(c.in)
		if ok != c.ok || ok && (first != c.first || last != c.last || total != c.total) {
			t.Errorf("%q: %d-%d/%d %v, want %d-%d/%d %v", c.in, first, last, total, ok, c.first, c.last, c.total, c.ok)
		}
	}
}

// fakeDoer answers every request with a body of n bytes.
type fakeDoer struct{ n int }

func (f fakeDoer) Do(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", f.n)))}, nil
}

// TestAnswersBounded: the body of an answer other than an object's bytes
// (a listing page, an error the SDK reads whole) fails past
// maxAnswerBytes; an object's ranged bytes are not cut.
func TestAnswersBounded(t *testing.T) {
	list, _ := http.NewRequest(http.MethodGet, "http://s3/bucket?list-type=2", nil)
	get, _ := http.NewRequest(http.MethodGet, "http://s3/bucket/key", nil)
	get.Header.Set("Range", "bytes=0-1")
	for _, c := range []struct {
		req  *http.Request
		n    int
		fail bool
	}{
		{list, maxAnswerBytes, false},
		{list, maxAnswerBytes + 1, true},
		{get, maxAnswerBytes + 1, false},
	} {
		resp, err := boundedClient{fakeDoer{c.n}}.Do(c.req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if c.fail != errors.Is(err, ErrBadAnswer) || !c.fail && len(b) != c.n {
			t.Errorf("%s of %d bytes: read %d, %v", c.req.URL, c.n, len(b), err)
		}
	}
}
