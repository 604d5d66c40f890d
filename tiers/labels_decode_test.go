package tiers

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestLabelsDecoderMatchesJSON: the labels decoder gives what decodeLabels
// (encoding/json) gives, label set or error, for the text the writer
// writes (json.Marshal of random label sets with quotes, backslashes, HTML,
// control and non-ASCII characters, empty values) and for hand-written
// text (spacing, a name twice, escapes, invalid UTF-8, broken syntax).
func TestLabelsDecoderMatchesJSON(t *testing.T) {
	var d labelsDecoder
	var kept []labels.Labels // peek's, kept: peeks after must not change them
	var keptWant []labels.Labels
	check := func(text string) {
		t.Helper()
		want, wantErr := decodeLabels([]byte(text))
		got, err := d.decode([]byte(text))
		if (err != nil) != (wantErr != nil) || !labels.Equal(got, want) {
			t.Errorf("%q: got %v (err %v), want %v (err %v)", text, got, err, want, wantErr)
		}
		peeked, err := d.peek([]byte(text))
		if (err != nil) != (wantErr != nil) || !labels.Equal(peeked, want) {
			t.Errorf("%q: peek %v (err %v), want %v (err %v)", text, peeked, err, want, wantErr)
		}
		if err == nil {
			kept, keptWant = append(kept, d.keep(peeked)), append(keptWant, want)
		}
	}
	defer func() {
		for i := range kept {
			if !labels.Equal(kept[i], keptWant[i]) {
				t.Fatalf("kept label set %d is %v after later peeks, want %v", i, kept[i], keptWant[i])
			}
		}
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "b", "_", "0", "\"", "\\", "<", "&", ">", "\n", "\x01", "é", "日本", "\u2028", " ", "/", "{", "}", ":", ","}
	word := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	plain := 0
	for range 5000 {
		b := labels.NewBuilder(labels.FromStrings("__name__", "vllm:num_requests_running"))
		for range rng.IntN(8) {
			b.Set("l"+word(rng.IntN(3)), word(rng.IntN(6)))
		}
		js, err := json.Marshal(b.Labels())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.plain(js); ok {
			plain++
		}
		check(string(js))
	}
	if plain == 0 {
		t.Fatal("no generated text took the plain path")
	}
	for _, text := range []string{
		`{}`, ` { } `, `{"__name__":"up"}`, ` {"__name__" : "up" , "job":"a"} `, `{"job":"a","__name__":"up"}`,
		`{"a":"1","a":"2"}`, `{"a":""}`, `{"":"x"}`, `{"a":"\u00e9"}`, `{"a":"\ud83d\ude00"}`, `{"a":"x\/y"}`,
		"{\"a\":\"\xff\"}", "{\"a\":\"\t\"}", `{"a":1}`, `{"a":"1",}`, `{"a" "1"}`, `{"a":"1"`, `{"a":"1"}x`, `[]`, ``, `null`,
	} {
		check(text)
	}
}

// BenchmarkLabelsDecode: one series' labels column text as a file reader
// admits it, through encoding/json and through the labels decoder.
func BenchmarkLabelsDecode(b *testing.B) {
	text, err := json.Marshal(labels.FromStrings("__name__", "vllm:e2e_request_latency_seconds_bucket", "engine", "0",
		"instance", "10.0.3.17:8000", "job", "vllm", "le", "2.5", "model_name", "meta-llama/Llama-3.1-8B-Instruct",
		"namespace", "inference", "pod", "vllm-llama-8b-7c9d5-x2x4q"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeLabels(text); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		var d labelsDecoder
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.decode(text); err != nil {
				b.Fatal(err)
			}
		}
	})
}
