package taskstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
)

// List implements Store with one listCmd per page. Tasks come in creation
// order (index score: creation ms, bumped to stay strictly increasing per
// owner; ties, which the bump prevents, would go by id). limit is clamped
// to 1..MaxListLimit. The cursor is opaque: base64url of the position
// (score, id) and an HMAC-SHA256 over owner, score and id truncated to 16
// bytes, so a tampered, foreign-owner or garbage cursor is ErrBadCursor
// (T-56, T-68) without touching Redis. Positions survive the expiry of the
// task they name. Every task Get can see is listed exactly once across
// the pages (T-55), also when tasks are created while paging: new tasks
// sort after every existing one.
func (s *Redis) List(ctx context.Context, owner, cursor string, limit int) ([]Task, string, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	limit = min(max(limit, 1), MaxListLimit)
	if !validOwner(owner) {
		if cursor != "" {
			return nil, "", ErrBadCursor
		}
		return nil, "", nil
	}
	start, after := "0", "" // below 0: withdrawn ids (withdrawCmd)
	if cursor != "" {
		score, id, ok := s.openCursor(owner, cursor)
		if !ok {
			return nil, "", ErrBadCursor
		}
		start, after = strconv.FormatInt(score, 10), id
	}
	vals, err := s.run(ctx, listCmd, []string{s.k.index(owner)},
		s.k.taskPrefix(owner), start, after, limit, s.nowMS()).Slice()
	if err != nil {
		return nil, "", wrapErr("list", "", err)
	}
	rec := 2 + len(metaFields) // id, score, meta...
	if len(vals) == 0 || (len(vals)-1)%rec != 0 {
		return nil, "", fmt.Errorf("taskstore: list: reply of %d values", len(vals))
	}
	more, _ := vals[0].(int64)
	tasks := make([]Task, 0, (len(vals)-1)/rec)
	var lastScore int64
	for i := 1; i < len(vals); i += rec {
		id, _ := vals[i].(string)
		sc, _ := vals[i+1].(string)
		score, err := strconv.ParseInt(sc, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("taskstore: list: score %q: %w", sc, err)
		}
		t, err := decodeTask(owner, id, vals[i+2:i+rec])
		if err != nil || t == nil {
			return nil, "", fmt.Errorf("taskstore: list %s: bad script reply: %w", id, err)
		}
		tasks = append(tasks, *t)
		lastScore = score
	}
	if more != 1 || len(tasks) == 0 {
		return tasks, "", nil
	}
	return tasks, s.sealCursor(owner, lastScore, tasks[len(tasks)-1].ID), nil
}

const (
	cursorMACLen = 16
	maxCursorLen = 512
)

// cursors seals and opens tasks/list cursors with an HMAC key; every store
// implementation issues the same format.
type cursors struct{ mac *atomic.Pointer[[]byte] }

// newCursors returns cursors sealed with mac (SetCursorKey may replace it).
func newCursors(mac []byte) cursors {
	c := cursors{mac: new(atomic.Pointer[[]byte])}
	c.mac.Store(&mac)
	return c
}

// sealCursor encodes score (8 bytes big endian) | id | MAC.
func (s cursors) sealCursor(owner string, score int64, id string) string {
	b := make([]byte, 0, 8+len(id)+cursorMACLen)
	b = binary.BigEndian.AppendUint64(b, uint64(score))
	b = append(b, id...)
	b = append(b, s.cursorMAC(owner, score, id)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s cursors) openCursor(owner, c string) (score int64, id string, ok bool) {
	if len(c) > maxCursorLen {
		return 0, "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 8+1+cursorMACLen {
		return 0, "", false
	}
	score = int64(binary.BigEndian.Uint64(b))
	id = string(b[8 : len(b)-cursorMACLen])
	if !validID(id) || !hmac.Equal(b[len(b)-cursorMACLen:], s.cursorMAC(owner, score, id)) {
		return 0, "", false
	}
	return score, id, true
}

// cursorMAC is HMAC-SHA256(key, len(owner) | owner | score | id)[:16]; the
// length prefix keeps owner and id from sliding into each other.
func (s cursors) cursorMAC(owner string, score int64, id string) []byte {
	m := hmac.New(sha256.New, *s.mac.Load())
	var buf [binary.MaxVarintLen64 + 8]byte
	n := binary.PutUvarint(buf[:], uint64(len(owner)))
	m.Write(buf[:n])
	m.Write([]byte(owner))
	binary.BigEndian.PutUint64(buf[:8], uint64(score))
	m.Write(buf[:8])
	m.Write([]byte(id))
	return m.Sum(nil)[:cursorMACLen]
}
