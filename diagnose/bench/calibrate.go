package bench

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/strata-dev/strata/diagnose"
)

// CalibrationFit is the confidence map a split's diagnoses call for: the
// share of them that were right as a function of the confidence they
// stated, fitted by isotonic regression (fitCalibration). Fitted on the
// tuning split, Raw is what diagnose's calibration table becomes
// (docs/diagnosis.md, "Calibration"); the held-out split's fit only shows
// how far its diagnoses are from the table shipped.
type CalibrationFit struct {
	// Diagnoses is how many it was fitted on: those naming a cause.
	Diagnoses int `json:"diagnoses"`
	// Stated maps a stated confidence to the observed share right:
	// piecewise linear between the knots, strictly increasing.
	Stated [][2]float64 `json:"stated_to_observed"`
	// Raw is Stated composed with the engine's current table: the map from
	// the engine's raw score, the table to ship. With the identity table
	// it is Stated.
	Raw [][2]float64 `json:"raw_to_observed"`
}

// minCalibrationBlock is the fewest diagnoses a knot of the fit stands
// for: fewer would let single diagnoses bend the map.
const minCalibrationBlock = 10

// calBlock is a run of diagnoses (sorted by stated confidence) that the
// fit gives one value: n diagnoses, right of them, sum of their
// confidences.
type calBlock struct {
	n     int
	right int
	sumX  float64
}

// value is the block's share right, smoothed by one right and one wrong
// pseudo-diagnosis (Laplace), so that no knot says 0 or 1 from a handful.
func (b calBlock) value() float64 { return (float64(b.right) + 1) / (float64(b.n) + 2) }

func (b calBlock) x() float64 { return b.sumX / float64(b.n) }

func (b *calBlock) merge(o calBlock) {
	b.n += o.n
	b.right += o.right
	b.sumX += o.sumX
}

// fitCalibration fits the observed share right against the stated
// confidence over the judged diagnoses that name a cause (a cause-unknown
// diagnosis has confidence 0 whatever the map): pool-adjacent-violators
// isotonic regression, blocks of at least minCalibrationBlock diagnoses,
// Laplace-smoothed values, adjacent blocks merged until the values
// strictly increase. The knots are the blocks' mean confidences and
// values, anchored at (0, 0) below the first and, above the last, at a
// value that keeps the map strictly increasing without claiming more
// than the last block showed: a strictly increasing map keeps the order
// of any two diagnoses' confidences. n is how many diagnoses it was fitted
// on; the knots are nil with fewer than two blocks' worth.
func fitCalibration(js []judged) (knots [][2]float64, n int) {
	pts := make([]calBlock, 0, len(js))
	for _, j := range js {
		if j.d.Cause == diagnose.CauseUnknown {
			continue // confidence 0 by definition, not a score to map
		}
		pts = append(pts, calBlock{n: 1, right: b2i(j.correct), sumX: j.d.Confidence})
	}
	if len(pts) < 2*minCalibrationBlock {
		return nil, len(pts)
	}
	slices.SortStableFunc(pts, func(a, b calBlock) int { return cmp.Compare(a.sumX, b.sumX) })
	// Equal confidences are one block: the map cannot tell them apart.
	var blocks []calBlock
	for i, p := range pts {
		if i > 0 && p.sumX == pts[i-1].sumX {
			blocks[len(blocks)-1].merge(p)
			continue
		}
		blocks = append(blocks, p)
	}
	// Small blocks join the next one (the last joins the one before);
	// then the values must strictly increase: any block not above the one
	// before is merged into it, until none is.
	for {
		merged := false
		for i := 0; i < len(blocks) && len(blocks) > 1; i++ {
			if blocks[i].n >= minCalibrationBlock {
				continue
			}
			if i+1 < len(blocks) {
				blocks[i].merge(blocks[i+1])
				blocks = slices.Delete(blocks, i+1, i+2)
			} else {
				blocks[i-1].merge(blocks[i])
				blocks = blocks[:i]
			}
			merged = true
			i--
		}
		for i := 1; i < len(blocks); i++ {
			if blocks[i].value() <= blocks[i-1].value() {
				blocks[i-1].merge(blocks[i])
				blocks = slices.Delete(blocks, i, i+1)
				merged = true
				i--
			}
		}
		if !merged {
			break
		}
	}
	knots = make([][2]float64, 0, len(blocks)+2)
	if x := blocks[0].x(); x > 0 {
		knots = append(knots, [2]float64{0, 0})
	}
	for _, b := range blocks {
		knots = append(knots, [2]float64{b.x(), b.value()})
	}
	if last := knots[len(knots)-1]; last[0] < 1 {
		knots = append(knots, [2]float64{1, last[1] + (1-last[1])*(1-last[0])})
	}
	return knots, len(pts)
}

// invertMap is the x at which strictly increasing map knots reach y
// (clamped to the map's ends): the map through the knots swapped.
func invertMap(knots [][2]float64, y float64) float64 {
	swapped := make([][2]float64, len(knots))
	for i, k := range knots {
		swapped[i] = [2]float64{k[1], k[0]}
	}
	return diagnose.PiecewiseLinear(swapped, y)
}

// composeMaps is fit ∘ cur as knots: the raw score's map when cur turned
// raw scores into the stated confidences fit was fitted on. Its knots are
// cur's and the raw scores cur maps onto fit's knots.
func composeMaps(fit, cur [][2]float64) [][2]float64 {
	xs := make([]float64, 0, len(fit)+len(cur))
	for _, k := range cur {
		xs = append(xs, k[0])
	}
	for _, k := range fit {
		xs = append(xs, invertMap(cur, k[0]))
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	out := make([][2]float64, 0, len(xs))
	for _, x := range xs {
		y := diagnose.PiecewiseLinear(fit, diagnose.PiecewiseLinear(cur, x))
		if k := len(out) - 1; k >= 0 && y <= out[k][1] {
			continue // a flat stretch of cur: keep the map strictly increasing
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

// calibrationFit fits a split's diagnoses and composes the fit with the
// engine's current table; nil when there are too few diagnoses.
func calibrationFit(js []judged) *CalibrationFit {
	stated, n := fitCalibration(js)
	if stated == nil {
		return nil
	}
	return &CalibrationFit{Diagnoses: n, Stated: stated, Raw: composeMaps(stated, diagnose.CalibrationTable())}
}

// goLiteral renders knots as the Go literal diagnose's calibration table
// is written in, rounded to 3 decimals as the confidences are.
func goLiteral(knots [][2]float64) string {
	var b strings.Builder
	b.WriteString("[][2]float64{")
	for i, k := range knots {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{%.3f, %.3f}", k[0], k[1])
	}
	b.WriteString("}")
	return b.String()
}
