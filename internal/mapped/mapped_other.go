//go:build !linux

package mapped

// Supported reports whether Release does anything on this platform.
const Supported = false

// Release does nothing outside Linux.
func Release(...string) (bytesAdvised int64, mappings int, err error) { return 0, 0, nil }

// PageOut does nothing outside Linux.
func PageOut(...string) (bytesAdvised int64, err error) { return 0, nil }

// SharedResident returns 0 outside Linux: a Trigger then fires by time only.
func SharedResident() (int64, error) { return 0, nil }

// ReleaseBehind does nothing outside Linux: the pages stay mapped until the
// file is closed.
func ReleaseBehind(_ []byte, done, _ int) int { return done }
