package query

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
)

const (
	acceptEncoding  = "Accept-Encoding"
	contentEncoding = "Content-Encoding"
)

// compressors compresses the API's responses as Prometheus'
// httputil.CompressionHandler does (gzip or deflate, whichever the client's
// Accept-Encoding names first, at the default level), from pooled encoders.
//
// Prometheus' handler builds a new encoder for every response, about 1 MiB
// of tables and history buffers for a response of a few kilobytes: five
// times the rest of a dashboard panel's allocations, and the garbage the
// dashboard's collections are mostly for (BenchmarkDashboardPanel). A
// pooled encoder is reset instead: it writes what a fresh one writes,
// without allocating. (The stream ends at Close, without the empty block
// Prometheus' Flush before Close adds.)
//
// compressors is safe for concurrent use.
type compressors struct {
	gzip, zlib sync.Pool
}

// encoder is a pooled gzip or zlib writer.
type encoder interface {
	io.WriteCloser
	Reset(io.Writer)
}

// wrap returns h, a handler in Prometheus' CompressionHandler (as every
// route of its API but remote read is), answering compressed from a pooled
// encoder when the request accepts it. The request h sees then accepts no
// encoding, so that Prometheus' handler writes its plain bytes through; it
// still adds its "Vary: Accept-Encoding", as every response needs.
func (c *compressors) wrap(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, pool := c.negotiate(r.Header.Get(acceptEncoding))
		if pool == nil {
			h(w, r)
			return
		}
		enc, _ := pool.Get().(encoder)
		if enc == nil {
			enc = c.newEncoder(name)
		}
		enc.Reset(w)
		w.Header().Set(contentEncoding, name)
		cw := &compressedWriter{ResponseWriter: w, enc: enc}
		plain := *r // Prometheus' handlers leave the request as they find it
		plain.Header = r.Header.Clone()
		plain.Header.Del(acceptEncoding)
		// A handler that panics leaves the encoder unreturned: net/http
		// aborts the response, and the pool makes a new one.
		h(cw, &plain)
		cw.close()
		enc.Reset(nil) // the pool keeps no reference to the response
		pool.Put(enc)
	}
}

// negotiate returns the encoding to answer with and its pool: the first of
// gzip and deflate the Accept-Encoding header names (quality values are
// ignored, as Prometheus ignores them), none when it names neither.
func (c *compressors) negotiate(accept string) (string, *sync.Pool) {
	for accept != "" {
		var enc string
		enc, accept, _ = strings.Cut(accept, ",")
		switch strings.TrimSpace(enc) {
		case "gzip":
			return "gzip", &c.gzip
		case "deflate":
			return "deflate", &c.zlib
		}
	}
	return "", nil
}

func (c *compressors) newEncoder(name string) encoder {
	if name == "gzip" {
		return gzip.NewWriter(nil)
	}
	return zlib.NewWriter(nil)
}

// compressedWriter is the response writer a wrapped handler writes to.
type compressedWriter struct {
	http.ResponseWriter
	enc         encoder
	wroteHeader bool
}

func (c *compressedWriter) WriteHeader(code int) {
	if !c.wroteHeader {
		c.wroteHeader = true
		c.Header().Del("Content-Length") // the handler's length is the plain body's
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *compressedWriter) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	return c.enc.Write(p)
}

// close ends the compressed stream. A handler that wrote nothing still
// answers with an empty stream, as Content-Encoding promises one (and as
// Prometheus does).
func (c *compressedWriter) close() {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	// An error here is the client's connection failing; the handler's
	// own writes saw it already.
	_ = c.enc.Close()
}
