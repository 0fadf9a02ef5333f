package sysconn

import "golang.org/x/sys/unix"

// canWatch: Linux reports a peer's close (POLLRDHUP) even when unread data
// precedes it.
const canWatch = true

// peerClosed reports whether the peer of socket fd shut down its sending
// side or reset the connection, without reading from it.
func peerClosed(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	}
}
