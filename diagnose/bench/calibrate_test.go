package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-dev/strata/diagnose"
)

func judgedAt(conf float64, right bool) judged {
	return judged{d: diagnose.Diagnosis{Cause: "power_cap", Confidence: conf}, correct: right}
}

// checkMap fails unless knots are a strictly increasing map of [0, 1] into
// (0, 1]-valued confidences, starting at 0 and ending at 1.
func checkMap(t *testing.T, knots [][2]float64) {
	t.Helper()
	if len(knots) < 2 || knots[0][0] != 0 || knots[len(knots)-1][0] != 1 {
		t.Fatalf("knots %v: want the map to span [0, 1]", knots)
	}
	for i, k := range knots {
		if k[1] < 0 || k[1] > 1 {
			t.Fatalf("knot %d %v: value outside [0, 1]", i, k)
		}
		if i > 0 && (k[0] <= knots[i-1][0] || k[1] <= knots[i-1][1]) {
			t.Fatalf("knots %v: not strictly increasing at %d", knots, i)
		}
	}
}

// TestFitCalibrationRecoversTheCurve: diagnoses whose chance of being right
// is a known increasing function of their stated confidence; the fit is
// close to that function, and restating them through it takes the expected
// calibration error from far off to small.
func TestFitCalibrationRecoversTheCurve(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	truth := func(x float64) float64 { return math.Pow(x, 4) } // over-confident below 1
	var js []judged
	for range 4000 {
		x := 0.4 + 0.6*rng.Float64()
		x = math.Round(x*1000) / 1000
		js = append(js, judgedAt(x, rng.Float64() < truth(x)))
	}
	fit, _ := fitCalibration(js)
	checkMap(t, fit)
	for _, x := range []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0.97} {
		if got, want := diagnose.PiecewiseLinear(fit, x), truth(x); math.Abs(got-want) > 0.07 {
			t.Errorf("fit(%.2f) = %.3f, want about %.3f", x, got, want)
		}
	}
	_, before := reliability(js)
	restated := make([]judged, len(js))
	for i, j := range js {
		restated[i] = judgedAt(diagnose.PiecewiseLinear(fit, j.d.Confidence), j.correct)
	}
	_, after := reliability(restated)
	if before < 0.2 || after > 0.05 {
		t.Errorf("expected calibration error %.3f before, %.3f after: want the fit to remove most of it", before, after)
	}
}

// TestFitCalibrationPoolsViolators: confidence that does not rank (the
// confident half wrong, the doubtful half right) gives no slope to fit:
// the two pool into one knot at their mean confidence and pooled share,
// between the anchors.
func TestFitCalibrationPoolsViolators(t *testing.T) {
	var js []judged
	for range 50 {
		js = append(js, judgedAt(0.5, true), judgedAt(0.9, false))
	}
	fit, _ := fitCalibration(js)
	checkMap(t, fit)
	if len(fit) != 3 || math.Abs(fit[1][0]-0.7) > 1e-9 || math.Abs(fit[1][1]-0.5) > 1e-9 {
		t.Errorf("fit %v: want one knot, (0.7, 0.5), between the anchors", fit)
	}
	if got, _ := fitCalibration(js[:2*minCalibrationBlock-1]); got != nil {
		t.Errorf("fit of %d diagnoses = %v, want none", 2*minCalibrationBlock-1, got)
	}
}

// TestFitCalibrationBlocks: no knot between the anchors stands for fewer
// than minCalibrationBlock diagnoses, and cause-unknown diagnoses
// (confidence 0 by definition) do not enter the fit.
func TestFitCalibrationBlocks(t *testing.T) {
	var js []judged
	for i := range 45 { // a few diagnoses at each confidence, rising
		x := 0.55 + float64(i%15)*0.03
		js = append(js, judgedAt(x, i%15 > 4+i%3))
	}
	fit, _ := fitCalibration(js)
	checkMap(t, fit)
	if inner := len(fit) - 2; inner > len(js)/minCalibrationBlock {
		t.Errorf("%d knots for %d diagnoses: blocks smaller than %d", inner, len(js), minCalibrationBlock)
	}
	withUnknown := slices.Clone(js)
	for range 30 {
		withUnknown = append(withUnknown, judged{d: diagnose.Diagnosis{Cause: diagnose.CauseUnknown}})
	}
	if got, n := fitCalibration(withUnknown); !slices.Equal(got, fit) || n != len(js) {
		t.Errorf("fit with unknown diagnoses %v of %d, without %v of %d: want the same", got, n, fit, len(js))
	}
}

// TestComposeMaps: the composed map is the fit applied after the current
// table, at any raw score.
func TestComposeMaps(t *testing.T) {
	fit := [][2]float64{{0, 0}, {0.6, 0.1}, {0.85, 0.5}, {0.95, 0.97}, {1, 0.975}}
	identity := [][2]float64{{0, 0}, {1, 1}}
	got := composeMaps(fit, identity)
	same := len(got) == len(fit)
	for i := 0; same && i < len(fit); i++ {
		same = math.Abs(got[i][0]-fit[i][0]) < 1e-12 && math.Abs(got[i][1]-fit[i][1]) < 1e-12
	}
	if !same {
		t.Errorf("fit after the identity = %v, want %v", got, fit)
	}
	cur := [][2]float64{{0, 0}, {0.5, 0.7}, {1, 0.9}}
	got = composeMaps(fit, cur)
	checkMap(t, got)
	for x := 0.0; x <= 1; x += 0.01 {
		if d := diagnose.PiecewiseLinear(got, x) - diagnose.PiecewiseLinear(fit, diagnose.PiecewiseLinear(cur, x)); math.Abs(d) > 1e-9 {
			t.Fatalf("composed(%.2f) off by %g", x, d)
		}
	}
}
