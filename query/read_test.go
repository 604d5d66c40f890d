package query

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// readRequest builds a remote read of http_requests_total{code="500"} over
// the whole test data set, accepting the given response types.
func readRequest(t *testing.T, url string, types ...prompb.ReadRequest_ResponseType) *http.Request {
	t.Helper()
	return readRequestFor(t, url, nil, types...)
}

// readRequestFor is readRequest with more matchers.
func readRequestFor(t *testing.T, url string, more []*labels.Matcher, types ...prompb.ReadRequest_ResponseType) *http.Request {
	t.Helper()
	q, err := remote.ToQuery(t0, t0+int64(testSamples)*testStep, append([]*labels.Matcher{
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "http_requests_total"),
		labels.MustNewMatcher(labels.MatchEqual, "code", "500"),
	}, more...), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := (&prompb.ReadRequest{Queries: []*prompb.Query{q}, AcceptedResponseTypes: types}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, data)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	return req
}

// checkReadSeries checks the series a read returned: http_requests_total
// {code="500"} with value i at t0 + i*15s.
func checkReadSeries(t *testing.T, lset []prompb.Label, ts []int64, vs []float64) {
	t.Helper()
	checkReadSeriesLabels(t, lset, ts, vs, labels.FromStrings("__name__", "http_requests_total", "code", "500", "instance", "a", "job", "vllm"))
}

// checkReadSeriesLabels is checkReadSeries with the labels expected.
func checkReadSeriesLabels(t *testing.T, lset []prompb.Label, ts []int64, vs []float64, wantLabels labels.Labels) {
	t.Helper()
	b := labels.NewScratchBuilder(len(lset))
	for _, l := range lset {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	gotLabels := b.Labels()
	if !labels.Equal(gotLabels, wantLabels) {
		t.Errorf("labels %s, want %s", gotLabels, wantLabels)
	}
	if len(ts) != testSamples {
		t.Fatalf("%d samples, want %d", len(ts), testSamples)
	}
	for i := range ts {
		if ts[i] != t0+int64(i)*testStep || vs[i] != float64(i) {
			t.Fatalf("sample %d is (%d, %g), want (%d, %d)", i, ts[i], vs[i], t0+int64(i)*testStep, i)
		}
	}
}

// TestRemoteRead reads the raw tier back with Prometheus' remote read
// protocol, in both response types, as a Prometheus with remote_read pointing
// at Strata would.
func TestRemoteRead(t *testing.T) {
	srv, _ := newTestServer(t, DefaultConfig())

	// Each response type, decoded as Prometheus' remote-read client does.
	for _, tc := range []struct {
		rt            prompb.ReadRequest_ResponseType
		header, value string // a header the answer must have, by prefix
	}{
		{prompb.ReadRequest_SAMPLES, "Content-Encoding", "snappy"},
		{prompb.ReadRequest_STREAMED_XOR_CHUNKS, "Content-Type", "application/x-streamed-protobuf"},
	} {
		t.Run(tc.rt.String(), func(t *testing.T) {
			got, h := readAll(t, srv, readRequest(t, srv.URL, tc.rt))
			if !strings.HasPrefix(h.Get(tc.header), tc.value) {
				t.Errorf("%s: %q, want %q", tc.header, h.Get(tc.header), tc.value)
			}
			if len(got) != 1 {
				t.Fatalf("%d series, want 1", len(got))
			}
			checkReadSeries(t, got[0].labels, got[0].ts, got[0].vs)
		})
	}

	t.Run("external labels", func(t *testing.T) {
		// As Prometheus' global external_labels: added to every series
		// returned (a series' own label of the same name wins), and an
		// equality matcher on one is answered by the label, not the
		// storage: cluster="eu" selects the series, cluster="us" none.
		cfg := DefaultConfig()
		cfg.ExternalLabels = labels.FromStrings("cluster", "eu", "instance", "external")
		ext, _ := newTestServer(t, cfg)
		want := labels.FromStrings("__name__", "http_requests_total", "cluster", "eu", "code", "500", "instance", "a", "job", "vllm")
		for _, tc := range []struct {
			name   string
			more   []*labels.Matcher
			series int
		}{
			{"no matcher on them", nil, 1},
			{"matching one", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "cluster", "eu")}, 1},
			{"not matching one", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "cluster", "us")}, 0},
		} {
			for _, rt := range []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS} {
				t.Run(tc.name+"/"+rt.String(), func(t *testing.T) {
					got, _ := readAll(t, ext, readRequestFor(t, ext.URL, tc.more, rt))
					if len(got) != tc.series {
						t.Fatalf("%d series, want %d", len(got), tc.series)
					}
					for _, s := range got {
						checkReadSeriesLabels(t, s.labels, s.ts, s.vs, want)
					}
				})
			}
		}
	})

	t.Run("sample limit", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.RemoteReadSampleLimit = 10
		limited, _ := newTestServer(t, cfg)
		resp, err := limited.Client().Do(readRequest(t, limited.URL, prompb.ReadRequest_SAMPLES))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "exceeded sample limit (10)") {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})

	t.Run("GET is not allowed", func(t *testing.T) {
		req := readRequest(t, srv.URL)
		req.Method = http.MethodGet
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("status %d, want 405", resp.StatusCode)
		}
	})
}

// readSeries is one series a remote read returned.
type readSeries struct {
	labels []prompb.Label
	ts     []int64
	vs     []float64
}

// readAll sends req, which asks for one response type, and returns the
// series of the answer, decoding either type, and the answer's headers. A
// streamed series whose chunks span frames is one series. Chunks are
// decoded by the encoding they declare, as Prometheus' remote-read client
// does: the raw tier answers with its own chunks (XOR2 by default; strata
// serve's stitched view re-encodes them as XOR).
func readAll(t *testing.T, srv *httptest.Server, req *http.Request) ([]readSeries, http.Header) {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out []readSeries
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-streamed-protobuf") {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		data, err := snappy.Decode(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		var rr prompb.ReadResponse
		if err := rr.Unmarshal(data); err != nil {
			t.Fatal(err)
		}
		for _, res := range rr.Results {
			for _, s := range res.Timeseries {
				rs := readSeries{labels: s.Labels}
				for _, smp := range s.Samples {
					rs.ts, rs.vs = append(rs.ts, smp.Timestamp), append(rs.vs, smp.Value)
				}
				out = append(out, rs)
			}
		}
		return out, resp.Header
	}
	reader := remote.NewChunkedReader(resp.Body, config.DefaultChunkedReadLimit, nil)
	for {
		var msg prompb.ChunkedReadResponse
		err := reader.NextProto(&msg)
		if errors.Is(err, io.EOF) {
			return out, resp.Header
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range msg.ChunkedSeries {
			if n := len(out); n == 0 || !slices.EqualFunc(out[n-1].labels, s.Labels, func(a, b prompb.Label) bool { return a.Name == b.Name && a.Value == b.Value }) {
				out = append(out, readSeries{labels: s.Labels})
			}
			rs := &out[len(out)-1]
			for _, c := range s.Chunks {
				chk, err := chunkenc.FromData(chunkenc.Encoding(c.Type), c.Data)
				if err != nil {
					t.Fatal(err)
				}
				it := chk.Iterator(nil)
				for it.Next() == chunkenc.ValFloat {
					tt, v := it.At()
					rs.ts, rs.vs = append(rs.ts, tt), append(rs.vs, v)
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
