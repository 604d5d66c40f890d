package archive

import (
	"math"
	"slices"
	"strings"

	"github.com/strata-dev/strata/diagnose"
)

// The archive's adjustment of a new diagnosis' candidates
// (docs/diagnosis-archive.md, "Learning from verdicts"). It is bounded: one
// cause moves by at most MaxAdjust, whatever the archive holds.
const (
	// MinSimilarity is the least similarity for a past case to count.
	MinSimilarity = 0.8
	// Weight is how much one fully similar confirmed (or relabelled) case
	// raises its cause, and one rejected case lowers it.
	Weight = 0.15
	// MaxAdjust bounds the total move of one cause's score.
	MaxAdjust = 0.3
	// MinArchiveScore is the least adjusted score for which a cause-unknown
	// diagnosis takes the cause its confirmed similar cases name.
	MinArchiveScore = 0.5
)

// Rerank returns d with its candidates rescored by its similar cases
// (d.SimilarCases, as the engine filled them from Similar):
//
//	move(c) = clip(Σ ±Weight·s over the similar cases of cause c with
//	          similarity s ≥ MinSimilarity, ±MaxAdjust)
//
// with + for a confirmed or relabelled case (its effective cause) and − for
// a rejected one; cases without a verdict do not count. A cause that only
// the archive names is added with score move(c). Scores stay in [0, 1]; the
// candidates are re-sorted, and the diagnosis' cause and confidence follow
// the first one (a cause-unknown diagnosis takes it only when its score
// reaches MinArchiveScore), its confidence the first one's score through
// the engine's calibration (diagnose.Calibrate): scores are raw, as the
// engine ranks candidates. Without verdicts d is returned unchanged.
func Rerank(d diagnose.Diagnosis) diagnose.Diagnosis {
	move := map[string]float64{}
	for _, s := range d.SimilarCases {
		if s.Similarity < MinSimilarity || s.Cause == "" || s.Cause == diagnose.CauseUnknown {
			continue
		}
		switch s.Verdict {
		case VerdictConfirmed, VerdictRelabelled:
			move[s.Cause] += Weight * s.Similarity
		case VerdictRejected:
			move[s.Cause] -= Weight * s.Similarity
		}
	}
	if len(move) == 0 {
		return d
	}
	cands := slices.Clone(d.Candidates)
	for c, m := range move {
		m = clip(m, MaxAdjust)
		i := slices.IndexFunc(cands, func(x diagnose.Candidate) bool { return x.Cause == c })
		if i < 0 {
			if m > 0 {
				cands = append(cands, diagnose.Candidate{Cause: c, Score: round3(m)})
			}
			continue
		}
		cands[i].Score = round3(math.Max(0, math.Min(1, cands[i].Score+m)))
	}
	slices.SortStableFunc(cands, func(a, b diagnose.Candidate) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Cause, b.Cause)
	})
	d.Candidates = cands
	if len(cands) > 0 && (d.Cause != diagnose.CauseUnknown || cands[0].Score >= MinArchiveScore) {
		d.Cause, d.Confidence = cands[0].Cause, diagnose.Calibrate(cands[0].Score)
	}
	return d
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
