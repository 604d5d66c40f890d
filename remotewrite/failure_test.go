package remotewrite

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

var errDiskFull = errors.New("disk full")

// failingAppendable wraps the raw tier and fails appends to series named
// "boom" with an error that is not the client's fault.
type failingAppendable struct {
	raw       *tiers.Raw
	rollbacks int
}

func (f *failingAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &failingAppender{AppenderV2: f.raw.AppenderV2(ctx), f: f}
}

type failingAppender struct {
	storage.AppenderV2
	f *failingAppendable
}

func (a *failingAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	if ls.Get("__name__") == "boom" {
		return 0, errDiskFull
	}
	return a.AppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
}

func (a *failingAppender) Rollback() error {
	a.f.rollbacks++
	return a.AppenderV2.Rollback()
}

func TestHandlerStorageFailureRollsBack(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	fa := &failingAppendable{raw: env.raw}
	h, err := NewHandler(DefaultConfig(), fa, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	env.h = h
	for _, ct := range []string{ctV1, ctV2} {
		t.Run(ct, func(t *testing.T) {
			var body []byte
			if ct == ctV1 {
				body = encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
					series("before_boom", nil, prompb.Sample{Value: 1, Timestamp: ms(0)}),
					series("boom", nil, prompb.Sample{Value: 1, Timestamp: ms(0)}),
				}})
			} else {
				b := newV2()
				b.add(writev2TS(b, "before_boom"))
				b.add(writev2TS(b, "boom"))
				body = b.encode(t)
			}
			before := fa.rollbacks
			w := env.post(body, ct, "snappy")
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "disk full") {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if ct == ctV1 {
				checkNoWritten(t, w)
			} else {
				checkWritten(t, w, "0", "0", "0")
			}
			if fa.rollbacks != before+1 {
				t.Fatal("append was not rolled back")
			}
			if got := env.read(t, "before_boom"); len(got) != 0 {
				t.Fatalf("part of a failed request was kept: %v", got)
			}
		})
	}
}

func writev2TS(b *v2req, name string) writev2.TimeSeries {
	return writev2.TimeSeries{LabelsRefs: b.refs("__name__", name), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}}}
}
