//go:build !linux

package diagnose

import "os"

// arenaSupported: the rings' pages are kept on the heap on this platform
// (newPageArena makes an arena without a file, so none of these is called).
const arenaSupported = false

func mapChunk(*os.File, int64, int) ([]byte, error) { return nil, errNoArena }

func dropPages([]byte) error { return errNoArena }

func unmapChunk([]byte) error { return errNoArena }
