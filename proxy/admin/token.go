package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// maxTokenFile bounds the token file read: a token is a line, not a file.
const maxTokenFile = 4096

// tokenFile is the admin bearer token kept in a file (a mounted Secret).
// Each check stats the file (following symlinks) and re-reads it when its
// device, inode, size or modification time changed, so a rewritten file,
// a replaced file and a Kubernetes Secret volume's symlink swap (..data
// pointing at a new directory) all take effect on the next request. When
// the file cannot be read or is empty after a change, the last good token
// stays and the failure is logged once per change. Safe for concurrent use.
type tokenFile struct {
	path string
	log  zerolog.Logger

	mu    sync.Mutex
	stamp fileStamp
	sum   [sha256.Size]byte // SHA-256 of the current token
	fp    string            // its fingerprint
}

// fileStamp identifies one version of a file.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), uint64(st.Ino)
	}
	return s
}

// errEmptyToken: the token file holds no token.
var errEmptyToken = errors.New("the file holds no token (empty or only white space)")

// openTokenFile reads the token file once; an unreadable or empty file
// is an error (taskgate then refuses to start).
func openTokenFile(path string, log zerolog.Logger) (*tokenFile, error) {
	tf := &tokenFile{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := tf.load(stampOf(fi)); err != nil {
		return nil, err
	}
	return tf, nil
}

// load reads the file as of stamp s; tf.mu is held (or tf not shared yet).
func (tf *tokenFile) load(s fileStamp) error {
	tf.stamp = s // a failed read is not retried until the file changes again
	f, err := os.Open(tf.path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return err
	}
	if len(b) > maxTokenFile {
		return fmt.Errorf("the file is larger than %d bytes: not a token", maxTokenFile)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return errEmptyToken
	}
	tf.sum = sha256.Sum256(tok)
	tf.fp = fingerprint(tf.sum)
	return nil
}

// fingerprint is the first 8 hex digits of SHA-256(SHA-256(token)): it
// names a token in logs without revealing it.
func fingerprint(sum [sha256.Size]byte) string {
	f := sha256.Sum256(sum[:])
	return hex.EncodeToString(f[:4])
}

// refresh re-reads the file if it changed since the last read.
func (tf *tokenFile) refresh() {
	fi, err := os.Stat(tf.path)
	tf.mu.Lock()
	defer tf.mu.Unlock()
	if err != nil {
		if tf.stamp != (fileStamp{}) {
			tf.stamp = fileStamp{}
			tf.log.Error().Err(err).Str(logTokenFP, tf.fp).Msg("admin token file unreadable; the last token read stays valid")
		}
		return
	}
	s := stampOf(fi)
	if s == tf.stamp {
		return
	}
	old := tf.fp
	if err := tf.load(s); err != nil {
		tf.log.Error().Err(err).Str(logTokenFP, tf.fp).Msg("admin token file not reloaded; the last token read stays valid")
		return
	}
	if tf.fp != old {
		tf.log.Info().Str(logTokenFP, tf.fp).Str(logPreviousFP, old).Msg("admin token reloaded")
	}
}

// check reports whether got is the current token, comparing SHA-256
// digests in constant time (so neither content nor length leaks through
// timing), and returns the token's fingerprint.
func (tf *tokenFile) check(got []byte) (fp string, ok bool) {
	tf.refresh()
	sum := sha256.Sum256(got)
	tf.mu.Lock()
	want, fp := tf.sum, tf.fp
	tf.mu.Unlock()
	return fp, len(got) > 0 && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}
