package sim

import (
	"math"
	"strconv"
	"strings"
)

// valueFormat is how one exporter prints a sample value; matching it keeps
// the simulated exposition byte-compatible with the real one.
type valueFormat uint8

const (
	fmtPython    valueFormat = iota // prometheus_client floatToGoString (vLLM)
	fmtDCGMInt                      // dcgm-exporter int64 fields: %d
	fmtDCGMFloat                    // dcgm-exporter double fields: %f
	fmtGo                           // client_golang: strconv 'g', shortest
)

func appendValue(b []byte, f valueFormat, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	switch f {
	case fmtPython:
		return appendPythonFloat(b, v)
	case fmtDCGMInt:
		return strconv.AppendInt(b, int64(math.Round(v)), 10)
	case fmtDCGMFloat:
		return strconv.AppendFloat(b, v, 'f', 6, 64)
	default:
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	}
}

// appendPythonFloat reproduces prometheus_client.utils.floatToGoString: Python
// repr(float), except that a positive value with more than six integer digits
// switches to Go's exponent style (1.602126e+06).
func appendPythonFloat(b []byte, v float64) []byte {
	s := pythonRepr(v)
	dot := strings.IndexByte(s, '.')
	if v > 0 && dot > 6 && !strings.ContainsAny(s, "e") {
		mant := s[:1] + "." + s[1:dot] + s[dot+1:]
		mant = strings.TrimRight(mant, "0.")
		return append(append(b, mant...), "e+0"+strconv.Itoa(dot-1)...)
	}
	return append(b, s...)
}

// pythonRepr is Python's repr(float): the shortest round-tripping digits, in
// fixed notation when the decimal exponent is in [-4, 16), else scientific
// with a two-digit exponent; integral values keep a ".0".
func pythonRepr(v float64) string {
	if v == 0 {
		if math.Signbit(v) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	if exp < -4 || exp >= 16 {
		s := strconv.FormatFloat(v, 'e', -1, 64) // 1e-05, 1.5e+20
		mant, e, _ := strings.Cut(s, "e")
		sign := e[0]
		digits := strings.TrimLeft(e[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		return mant + "e" + string(sign) + digits
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
