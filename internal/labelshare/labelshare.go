// Package labelshare finds, for a label set, the equal one a storage
// already holds (the raw tier's head), so that a reader keeps a reference
// to it instead of a copy of its own.
package labelshare

import (
	"context"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// Finder looks label sets up in Src through its appenders' storage.GetRef.
// An appender is opened at the first Find and rolled back by Close:
// nothing is appended to Src. A nil Src finds nothing. A Finder is for one
// goroutine.
type Finder struct {
	Src storage.AppendableV2
	Ctx context.Context

	app storage.AppenderV2
	gr  storage.GetRef
}

// Find returns the label set Src holds equal to l, and false when it holds
// none (or its appenders cannot look labels up).
func (f *Finder) Find(l labels.Labels) (labels.Labels, bool) {
	if f.Src == nil {
		return labels.Labels{}, false
	}
	if f.app == nil {
		ctx := f.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		f.app = f.Src.AppenderV2(ctx)
		gr, ok := f.app.(storage.GetRef)
		if !ok {
			f.Close()
			f.Src = nil
			return labels.Labels{}, false
		}
		f.gr = gr
	}
	ref, held := f.gr.GetRef(l, l.Hash())
	if ref == 0 || !labels.Equal(held, l) {
		return labels.Labels{}, false
	}
	return held, true
}

// Close rolls the appender back, if one was opened.
func (f *Finder) Close() {
	if f.app != nil {
		_ = f.app.Rollback()
		f.app, f.gr = nil, nil
	}
}
