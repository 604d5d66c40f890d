package bench

import (
	"slices"
	"testing"

	"github.com/strata-dev/strata/dcgmbridge"
)

// TestShapesFromCatalogue checks that every family the generator sends is the
// catalogue's: name, kind and buckets, and label names that split it among the
// family's own.
func TestShapesFromCatalogue(t *testing.T) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	shapes, err := newShapes(cat)
	if err != nil {
		t.Fatal(err)
	}
	srcs := map[string]dcgmbridge.Source{"dcgm": dcgmbridge.SourceDCGM, "vllm": dcgmbridge.SourceVLLMV1, "ebpf": dcgmbridge.SourceEBPF}
	for _, s := range shapes {
		exp, ok := cat.Exposition(srcs[s.name])
		if !ok {
			t.Fatalf("shape %s: no exposition", s.name)
		}
		for _, f := range s.families {
			want, ok := exp.Family(f.name)
			if !ok {
				t.Errorf("%s: not in the %s exposition", f.name, exp.Source)
				continue
			}
			if k, _ := kindOf(want); k != f.kind || !slices.Equal(f.bounds, want.Buckets) {
				t.Errorf("%s: kind %d buckets %v, catalogue %s %v", f.name, f.kind, f.bounds, want.Type, want.Buckets)
			}
			if f.help != "" && f.help != want.Help {
				t.Errorf("%s: HELP %q, catalogue %q", f.name, f.help, want.Help)
			}
			for _, l := range f.extra {
				if !slices.Contains(want.Labels, l[0]) {
					t.Errorf("%s: label %s is not one of the family's %v", f.name, l[0], want.Labels)
				}
			}
		}
	}
	if newShapeBuilder(cat, dcgmbridge.SourceTGI).err == nil {
		t.Error("a source without an exposition was accepted")
	}
	b := newShapeBuilder(cat, dcgmbridge.SourceVLLMV1)
	b.family("vllm:no_such_family", false)
	if b.err == nil {
		t.Error("a family missing from the catalogue was accepted")
	}
}
