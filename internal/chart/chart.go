// Package chart holds what Strata's benchmark reports share to draw their
// PNG charts with gonum/plot: saving a plot atomically at a fixed size.
package chart

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// SavePNG renders p at 8x4 inches and writes it to path atomically.
func SavePNG(p *plot.Plot, path string) error {
	return SavePNGSize(p, path, 8*vg.Inch, 4*vg.Inch)
}

// SavePNGSize renders p at w x h and writes it to path atomically.
func SavePNGSize(p *plot.Plot, path string, w, h vg.Length) error {
	wt, err := p.WriterTo(w, h, "png")
	if err != nil {
		return fmt.Errorf("render %s: %w", path, err)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := wt.WriteTo(w)
		return err
	})
}
