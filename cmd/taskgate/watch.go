package main

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
)

// watchInterval is how often the watched files are checked.
const watchInterval = time.Second

// fileWatcher reloads files when they change on disk: every watchInterval
// it stats each watched file (following symlinks) and calls the entry's
// reload when a file is another file than before (os.SameFile: a new inode,
// as an editor's rename or a Kubernetes volume update makes), or its size
// or modification time changed, or it appeared or vanished.
//
// Polling stat rather than inotify: a Kubernetes ConfigMap or Secret
// volume updates by creating a new timestamped directory and atomically
// replacing the `..data` symlink the file's own symlink points through;
// inotify on the file sees nothing of that (it watches the old inode) and
// must watch the directory for the `..data` rename instead, then re-add
// watches, and differs between Linux and elsewhere. A stat per file per
// second resolves the whole symlink chain each time, so every way a file
// can be replaced (in place, by rename, by symlink swap, by a bind mount)
// is seen within a second, on any OS, at a cost of a few microseconds a
// second.
//
// Entries are added before run starts; run is the only goroutine that
// touches them.
type fileWatcher struct {
	log     zerolog.Logger
	entries []*watchEntry
}

// watchEntry is a set of files reloaded together (a certificate and its
// key) and the reload to call.
type watchEntry struct {
	paths  []string
	last   []fileSig
	reload func()
}

// fileSig is what a stat tells about a file; info is nil when the stat
// failed.
type fileSig struct {
	info os.FileInfo
}

func statSig(path string) fileSig {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}
	}
	return fileSig{info: fi}
}

func (a fileSig) same(b fileSig) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// add watches paths, taking their state now as the loaded one: call it
// before loading the files, so a change while they load is not missed.
func (w *fileWatcher) add(reload func(), paths ...string) {
	e := &watchEntry{reload: reload}
	for _, p := range paths {
		if p != "" {
			e.paths = append(e.paths, p)
			e.last = append(e.last, statSig(p))
		}
	}
	w.entries = append(w.entries, e)
}

// check reloads the entries whose files changed since the last check.
func (w *fileWatcher) check() {
	for _, e := range w.entries {
		changed := false
		for i, p := range e.paths {
			if s := statSig(p); !s.same(e.last[i]) {
				e.last[i], changed = s, true
			}
		}
		if changed {
			e.reload()
		}
	}
}

// run checks the files every watchInterval until ctx ends.
func (w *fileWatcher) run(ctx context.Context) {
	if len(w.entries) == 0 {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("file watcher stopped by a panic; files are no longer reloaded on change")
		}
	}()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}
