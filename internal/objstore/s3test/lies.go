package s3test

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Lies are the ways a FaultProxy answers otherwise than its server did, as
// a broken or hostile store might: a reader must refuse each of them and
// never turn one into data. The zero Lies tells the truth. Objects are
// named "bucket/key".
type Lies struct {
	// Sizes are the sizes that listings and HEADs report for the objects
	// named, in place of their own (negative ones in listings only: HTTP
	// has no negative Content-Length).
	Sizes map[string]int64
	// Listing makes every page of a listing say it goes on.
	Listing ListingLie
	// LongKeys, when positive, makes every page of a listing hold 1,000
	// made-up objects (S3's most per page) in place of the server's, with
	// keys of LongKeys bytes under the prefix listed, new on every page:
	// with Listing, a listing of as many long keys as a reader will take.
	LongKeys int
	// IgnoreRange answers a ranged GET with 200 and the whole object.
	IgnoreRange bool
	// ShiftRange answers a ranged GET with the bytes this many further on
	// (and says so in Content-Range): another range than asked for.
	ShiftRange int64
	// ExtraByte adds a byte to the body of a GET that succeeds, without a
	// Content-Length.
	ExtraByte bool
	// StripETag and StripLastModified drop the ETag and Last-Modified of
	// objects from listings, HEADs and GETs.
	StripETag, StripLastModified bool
	// IgnoreConditions drops If-Match, If-None-Match, If-Modified-Since and
	// If-Unmodified-Since from HEADs and GETs, as a store without them would.
	IgnoreConditions bool
	// Replaced answers the GETs of each object named with the bytes and
	// headers of another ("bucket/key" to "bucket/other"): a new version
	// put in its place, with listings and HEADs still describing the old.
	Replaced map[string]string
}

// ListingLie is how a FaultProxy's listings never end.
type ListingLie int

const (
	// ListingTrue: listings as the server gives them.
	ListingTrue ListingLie = iota
	// ListingRepeats: every page says it is truncated and gives the same
	// continuation token; the server is asked for the first page each time.
	ListingRepeats
	// ListingEndless: the same, with a new token every page.
	ListingEndless
	// ListingNoToken: every page says it is truncated and gives no token.
	ListingNoToken
)

// signer signs the requests a lie changes, with the server's credentials.
type signer struct {
	creds  aws.Credentials
	region string
	v4     *v4.Signer
}

// NewLyingProxy is a FaultProxy in front of s that refuses nothing and can
// tell every lie of SetLies: it signs the requests a lie changes (a Range
// dropped, a key replaced) with s's credentials.
func NewLyingProxy(t testing.TB, s *Server) *FaultProxy {
	t.Helper()
	p := NewFaultProxy(t, s.Endpoint, 0, 1)
	p.signer = &signer{
		creds:  aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey},
		region: s.Region,
		// S3 signs a path as it is sent, not escaped again.
		v4: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }),
	}
	return p
}

// SetLies makes the proxy tell lies l from now on; Lies{} tells the truth.
func (p *FaultProxy) SetLies(l Lies) {
	if l.Listing == ListingTrue && l.LongKeys == 0 && !l.IgnoreRange && l.ShiftRange == 0 && !l.ExtraByte && !l.StripETag &&
		!l.StripLastModified && !l.IgnoreConditions && len(l.Sizes) == 0 && len(l.Replaced) == 0 {
		p.lies.Store(nil)
		return
	}
	l.Sizes, l.Replaced = maps.Clone(l.Sizes), maps.Clone(l.Replaced)
	p.lies.Store(&l)
}

// Lied counts the answers a lie changed.
func (p *FaultProxy) Lied() int64 { return p.lied.Load() }

// pages numbers the tokens of ListingEndless and the pages of LongKeys.
var pages atomic.Int64

// keysPerPage is how many made-up objects a page of LongKeys holds.
const keysPerPage = 1000

// serveLies forwards r, changed by l, and answers with the server's answer
// changed by l.
func (p *FaultProxy) serveLies(w http.ResponseWriter, r *http.Request, l *Lies) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	name := bucket + "/" + key
	isList := r.Method == http.MethodGet && key == "" && r.URL.Query().Get("list-type") == "2"
	isGet := r.Method == http.MethodGet && key != ""
	isHead := r.Method == http.MethodHead && key != ""

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.target.Scheme, p.target.Host, r.Host
	if r.ContentLength == 0 {
		out.Body = nil
	}
	changed := p.changeRequest(out, l, isList, isGet, isHead, name)
	if changed {
		if p.signer == nil {
			http.Error(w, "s3test: this lie changes requests: make the proxy with NewLyingProxy", http.StatusInternalServerError)
			return
		}
		if err := p.signer.sign(out); err != nil {
			http.Error(w, "s3test: sign: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Del("Connection")
	h.Del("Keep-Alive")
	body := io.Reader(resp.Body)
	switch {
	case isList && resp.StatusCode == http.StatusOK:
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		lied := rewriteListing(b, bucket, r.URL.Query().Get("prefix"), l)
		changed = changed || !bytes.Equal(lied, b)
		h.Set("Content-Length", strconv.Itoa(len(lied)))
		body = bytes.NewReader(lied)
	case isGet || isHead:
		changed = changeHeaders(h, l, name, isHead) || changed
		if isGet && l.ExtraByte && resp.StatusCode/100 == 2 {
			h.Del("Content-Length")
			body = io.MultiReader(resp.Body, strings.NewReader("!"))
			changed = true
		}
	}
	if changed {
		p.lied.Add(1)
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, body)
	}
}

// changeRequest changes the request out by l, saying whether it did.
func (p *FaultProxy) changeRequest(out *http.Request, l *Lies, isList, isGet, isHead bool, name string) bool {
	changed := false
	if q := out.URL.Query(); isList && l.Listing != ListingTrue && q.Has("continuation-token") {
		q.Del("continuation-token") // the server knows no such token: ask it for the first page
		out.URL.RawQuery = q.Encode()
		changed = true
	}
	if isGet {
		if to, ok := l.Replaced[name]; ok {
			out.URL.Path, out.URL.RawPath = "/"+to, ""
			changed = true
		}
		if rng := out.Header.Get("Range"); rng != "" {
			switch {
			case l.IgnoreRange:
				out.Header.Del("Range")
				changed = true
			case l.ShiftRange != 0:
				out.Header.Set("Range", shiftRange(rng, l.ShiftRange))
				changed = true
			}
		}
	}
	if (isGet || isHead) && l.IgnoreConditions {
		for _, k := range []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"} {
			if out.Header.Get(k) != "" {
				out.Header.Del(k)
				changed = true
			}
		}
	}
	return changed
}

// changeHeaders changes the headers of an answer to a HEAD or GET by l,
// saying whether it did.
func changeHeaders(h http.Header, l *Lies, name string, isHead bool) bool {
	changed := false
	if size, ok := l.Sizes[name]; ok && isHead && size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		changed = true
	}
	if l.StripETag && h.Get("ETag") != "" {
		h.Del("ETag")
		changed = true
	}
	if l.StripLastModified && h.Get("Last-Modified") != "" {
		h.Del("Last-Modified")
		changed = true
	}
	return changed
}

// shiftRange moves "bytes=A-B" by d bytes (not below 0).
func shiftRange(rng string, d int64) string {
	var a, b int64
	if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &a, &b); err != nil {
		return rng
	}
	return fmt.Sprintf("bytes=%d-%d", max(0, a+d), max(0, b+d))
}

var (
	contentsRE = regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)
	keyRE      = regexp.MustCompile(`(?s)<Key>(.*?)</Key>`)
	sizeRE     = regexp.MustCompile(`<Size>-?\d+</Size>`)
	etagRE     = regexp.MustCompile(`(?s)<ETag>.*?</ETag>`)
	modifiedRE = regexp.MustCompile(`(?s)<LastModified>.*?</LastModified>`)
	truncRE    = regexp.MustCompile(`<IsTruncated>\w*</IsTruncated>`)
	tokenRE    = regexp.MustCompile(`(?s)<NextContinuationToken>.*?</NextContinuationToken>`)
)

// rewriteListing tells l's lies in the body of a ListObjectsV2 answer to a
// listing of prefix.
func rewriteListing(b []byte, bucket, prefix string, l *Lies) []byte {
	b = contentsRE.ReplaceAllFunc(b, func(c []byte) []byte {
		if m := keyRE.FindSubmatch(c); m != nil {
			if size, ok := l.Sizes[bucket+"/"+html.UnescapeString(string(m[1]))]; ok {
				c = sizeRE.ReplaceAll(c, []byte("<Size>"+strconv.FormatInt(size, 10)+"</Size>"))
			}
		}
		if l.StripETag {
			c = etagRE.ReplaceAll(c, nil)
		}
		if l.StripLastModified {
			c = modifiedRE.ReplaceAll(c, nil)
		}
		return c
	})
	if l.LongKeys > 0 {
		b = contentsRE.ReplaceAll(b, nil)
		end := bytes.LastIndex(b, []byte("</ListBucketResult>"))
		if end >= 0 {
			b = append(longKeys(b[:end:end], prefix, l.LongKeys), b[end:]...)
		}
	}
	if l.Listing == ListingTrue {
		return b
	}
	token := "<NextContinuationToken>s3test-repeats</NextContinuationToken>"
	switch l.Listing {
	case ListingEndless:
		token = fmt.Sprintf("<NextContinuationToken>s3test-%d</NextContinuationToken>", pages.Add(1))
	case ListingNoToken:
		token = ""
	}
	b = tokenRE.ReplaceAll(b, nil)
	goesOn := []byte("<IsTruncated>true</IsTruncated>" + token)
	if truncRE.Match(b) {
		return truncRE.ReplaceAll(b, goesOn)
	}
	return bytes.Replace(b, []byte("</ListBucketResult>"), append(goesOn, "</ListBucketResult>"...), 1)
}

// longKeys appends to b a page of keysPerPage made-up objects with keys of
// n bytes (or just longer, for a long prefix) under prefix, new on every
// page.
func longKeys(b []byte, prefix string, n int) []byte {
	page := pages.Add(1)
	prefix = html.EscapeString(prefix)
	b = slices.Grow(b, keysPerPage*(n+200))
	for i := range int64(keysPerPage) {
		b = append(b, "<Contents><Key>"...)
		start := len(b)
		b = append(b, prefix...)
		b = strconv.AppendInt(b, page, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, i, 10)
		for len(b)-start < n {
			b = append(b, 'k')
		}
		b = fmt.Appendf(b, "</Key><LastModified>2025-01-01T00:00:00.000Z</LastModified><ETag>&#34;%032x&#34;</ETag>"+
			"<Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>", page*keysPerPage+i)
	}
	return b
}

// sign signs r anew for the server.
func (s *signer) sign(r *http.Request) error {
	r.Header.Del("Authorization")
	r.Header.Del("X-Amz-Date")
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" // of no bytes
		r.Header.Set("X-Amz-Content-Sha256", hash)
	}
	return s.v4.SignHTTP(r.Context(), s.creds, r, hash, "s3", s.region, time.Now())
}
