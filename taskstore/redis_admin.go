package taskstore

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var _ Admin = (*Redis)(nil)

// adminBatch is how many index members one round trip of AdminStats (and
// at most of AdminList, whose first read is the page) reads: one range
// read, then one pipelined HMGET each.
const adminBatch = 256

// adminScanPages bounds the work of one AdminList call: it reads at most
// this many times max(limit+1, adminBatch) index members and, when the
// filter matched fewer than limit of them,
// returns the tasks found so far with a cursor at the last member read. A
// page may then be short although more tasks match.
const adminScanPages = 8

// AdminList implements Admin over the admin index P:tasks (every task,
// scored by creation ms): it reads members newest first below the cursor
// (and, with OlderThan, below now-OlderThan), reads their hashes in one
// pipeline per batch (on a Cluster the pipeline spans the owners' slots)
// and filters them. Members whose task is gone are removed on the way.
// The cost is one ZREVRANGEBYSCORE and one HMGET per member read; the
// keyspace is never scanned.
func (s *Redis) AdminList(ctx context.Context, f AdminFilter) ([]Task, string, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	limit := f.adminLimit()
	var after *adminPos
	if f.Cursor != "" {
		p, ok := s.openAdminCursor(f.Cursor)
		if !ok {
			return nil, "", ErrBadCursor
		}
		after = &p
	}
	now := s.nowMS()
	maxScore := int64(1<<62 - 1)
	if after != nil {
		maxScore = after.created
	}
	if f.OlderThan > 0 {
		maxScore = min(maxScore, now-f.OlderThan.Milliseconds()-1)
	}
	// The first read is the page (and one more); when the filter leaves
	// it short, the reads double up to adminBatch.
	batch := limit + 1
	budget := adminScanPages * max(limit+1, adminBatch)
	var out []Task
	var last adminPos
	var offset int64
	for read := 0; read < budget; {
		zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, s.k.adminIndex(), &redis.ZRangeBy{
			Max: strconv.FormatInt(maxScore, 10), Min: "-inf", Offset: offset, Count: int64(batch),
		}).Result()
		if err != nil {
			return nil, "", wrapErr("admin list", "", err)
		}
		read += len(zs)
		offset += int64(len(zs))
		var cand []adminPos
		for _, z := range zs {
			m, _ := z.Member.(string)
			p := adminPos{int64(z.Score), m}
			if after != nil && !p.before(*after) {
				continue
			}
			cand = append(cand, p)
		}
		tasks, err := s.adminRead(ctx, cand, now)
		if err != nil {
			return nil, "", err
		}
		for i, t := range tasks {
			if t == nil {
				offset-- // removed from the index: the ranks below shift up
				continue
			}
			if !f.matches(t, now) {
				continue
			}
			if len(out) == limit {
				return out, s.sealAdminCursor(last), nil
			}
			out = append(out, *t)
			last = cand[i]
		}
		if len(zs) < batch {
			return out, "", nil
		}
		if len(cand) > 0 {
			last = cand[len(cand)-1]
		}
		batch = max(batch, min(2*batch, adminBatch))
	}
	// Budget spent: resume after the last member read.
	return out, s.sealAdminCursor(last), nil
}

// adminRead reads the tasks at cand (nil for a gone one, whose index
// member it removes) in one pipeline.
func (s *Redis) adminRead(ctx context.Context, cand []adminPos, now int64) ([]*Task, error) {
	if len(cand) == 0 {
		return nil, nil
	}
	p := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(cand))
	owners, ids := make([]string, len(cand)), make([]string, len(cand))
	for i, c := range cand {
		owner, id, ok := parseLeaseMember(c.member)
		if !ok {
			continue
		}
		owners[i], ids[i] = owner, id
		cmds[i] = p.HMGet(ctx, s.k.task(owner, id), metaFields...)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrapErr("admin read", "", err)
	}
	out := make([]*Task, len(cand))
	var gone []any
	for i, cmd := range cmds {
		if cmd != nil {
			if t, err := decodeTask(owners[i], ids[i], cmd.Val()); err == nil && t != nil && now < t.ExpiresAt().UnixMilli() {
				out[i] = t
				continue
			}
		}
		gone = append(gone, cand[i].member)
	}
	if len(gone) > 0 {
		// Best effort: a member left behind is removed next time.
		_ = s.rdb.ZRem(ctx, s.k.adminIndex(), gone...).Err()
	}
	return out, nil
}

// AdminFind implements Admin: GET P:id:<id> (the owner, written by Create,
// expiring with the task), then Get.
func (s *Redis) AdminFind(ctx context.Context, id string) (*Task, error) {
	ctx, cancel := bound(ctx, s.opTimeout)
	defer cancel()
	if !validID(id) {
		return nil, ErrNotFound
	}
	owner, err := s.rdb.Get(ctx, s.k.taskOwner(id)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, wrapErr("admin find", id, err)
	}
	return s.Get(ctx, owner, id)
}
