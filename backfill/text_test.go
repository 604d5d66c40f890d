package backfill

import (
	"errors"
	"testing"
)

func TestParseText(t *testing.T) {
	cases := []struct {
		name, ct, in string
		series       int
		samples      int
		firstT       int64
		err          error
	}{
		{
			name: "prometheus text, ms timestamps, interleaved series",
			ct:   "text/plain",
			in: "# TYPE x counter\nx_total{a=\"1\"} 1 1000\nx_total{a=\"2\"} 5 1000\nx_total{a=\"1\"} 2 2000\n" +
				"# HELP g a gauge\ng 3.5 1500\n",
			series: 3, samples: 4, firstT: 1000,
		},
		{
			name:   "openmetrics, second timestamps",
			ct:     "application/openmetrics-text",
			in:     "# TYPE g gauge\ng{gpu=\"0\"} 1 10\ng{gpu=\"0\"} 2 11.5\n# EOF\n",
			series: 1, samples: 2, firstT: 10_000,
		},
		{
			name: "missing timestamp",
			ct:   "text/plain",
			in:   "g 1\n",
			err:  ErrNoTimestamp,
		},
		{
			name: "missing timestamp on a series seen before",
			ct:   "text/plain",
			in:   "g 1 1000\ng 2\n",
			err:  ErrNoTimestamp,
		},
		{
			name:   "one series spelled four ways",
			ct:     "text/plain",
			in:     "x{a=\"1\",b=\"2\"} 1 1000\nx{b=\"2\",a=\"1\"} 2 2000\nx{ a=\"1\", b=\"2\" } 3 3000\n{\"x\",b=\"2\",a=\"1\"} 4 4000\nx{a=\"1\",b=\"2\"} 5 5000\n",
			series: 1, samples: 5, firstT: 1000,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseText([]byte(tc.in), tc.ct)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range got {
				n += len(s.Samples)
			}
			if len(got) != tc.series || n != tc.samples || got[0].Samples[0].T != tc.firstT {
				t.Fatalf("got %d series, %d samples, first %+v", len(got), n, got)
			}
		})
	}
}

func TestParseTextRejectsGarbage(t *testing.T) {
	if _, err := ParseText([]byte("not a metric line {{{\n"), "text/plain"); err == nil {
		t.Fatal("garbage parsed")
	}
}

func FuzzParseText(f *testing.F) {
	f.Add([]byte("x_total{a=\"1\"} 1 1000\n"), false)
	f.Add([]byte("# TYPE g gauge\ng{gpu=\"0\"} 1 10\n# EOF\n"), true)
	f.Add([]byte("g NaN 5\ng +Inf 6\n"), false)
	f.Fuzz(func(t *testing.T, in []byte, om bool) {
		ct := "text/plain"
		if om {
			ct = "application/openmetrics-text"
		}
		series, err := ParseText(in, ct)
		if err != nil {
			return
		}
		for _, s := range series {
			if len(s.Samples) == 0 || s.Labels.IsEmpty() {
				t.Fatalf("parsed a series with no samples or labels: %+v", s)
			}
		}
	})
}
