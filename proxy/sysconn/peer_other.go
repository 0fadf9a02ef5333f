//go:build !linux

package sysconn

// canWatch: elsewhere a close cannot be told from data without reading,
// so WatchClose does nothing and a gone client shows as a failed write.
const canWatch = false

func peerClosed(uintptr) bool { return false }
