package taskstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SharedSecretLen is the length in bytes of a secret SharedSecret creates.
const SharedSecretLen = 32

// SharedSecretKey is the Redis key SharedSecret keeps the secret called
// name under, for a store with the given key prefix ("" = DefaultPrefix).
func SharedSecretKey(prefix, name string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + ":secret:" + name
}

// SharedSecret returns the secret called name kept in Redis, creating it
// first when it does not exist: SharedSecretLen random bytes, stored hex
// encoded with SET NX and no expiry, so the first of several processes to
// ask creates it and every other one (and every later restart) reads the
// same value. Processes sharing one Redis and prefix thereby share the
// secret without configuration. Anyone who can read that Redis key can read
// the secret. The secret is never rotated: deleting the key (or Redis
// losing its data) makes the next process to start create a new one, which
// the processes already running learn only through AssertSharedSecret.
func SharedSecret(ctx context.Context, rdb redis.UniversalClient, prefix, name string) ([]byte, error) {
	fresh := make([]byte, SharedSecretLen)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("taskstore: shared secret %s: %w", name, err)
	}
	v, _, err := AssertSharedSecret(ctx, rdb, prefix, name, fresh)
	return v, err
}

// AssertSharedSecret writes value as the secret called name when Redis has
// none (SET NX, no expiry) and returns the secret Redis holds afterwards:
// value itself with wrote true when this call stored it, else the value
// found there (which may differ from value). A process that keeps a shared
// secret in memory calls it periodically, so that after Redis lost its data
// (a restart without persistence) the first process to ask writes its
// secret back and every other one, and every process started later, reads
// that same secret instead of creating a new one. A stored value that is
// not 16 or more hex-encoded bytes is an error.
func AssertSharedSecret(ctx context.Context, rdb redis.UniversalClient, prefix, name string, value []byte) (stored []byte, wrote bool, err error) {
	key := SharedSecretKey(prefix, name)
	enc := hex.EncodeToString(value)
	// SET NX GET answers the value already there (or nil when this call
	// created it) in one round trip; it needs Redis 7.0. Older servers
	// answer a syntax error, handled below.
	old, err := rdb.SetArgs(ctx, key, enc, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return value, true, nil
	case err == nil:
		v, err := decodeSecret(name, old)
		return v, false, err
	case isSyntaxError(err):
		ok, err := rdb.SetNX(ctx, key, enc, 0).Result()
		if err != nil {
			return nil, false, fmt.Errorf("taskstore: shared secret %s: %w", name, err)
		}
		if ok {
			return value, true, nil
		}
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			return nil, false, fmt.Errorf("taskstore: shared secret %s: %w", name, err)
		}
		b, err := decodeSecret(name, v)
		return b, false, err
	default:
		return nil, false, fmt.Errorf("taskstore: shared secret %s: %w", name, err)
	}
}

// ErrBadSharedSecret is SharedSecret's and AssertSharedSecret's error when
// the value stored in Redis is not 16 or more hex-encoded bytes (written by
// something other than taskgate).
var ErrBadSharedSecret = errors.New("the stored value is not 16 or more hex-encoded bytes")

func decodeSecret(name, v string) ([]byte, error) {
	b, err := hex.DecodeString(v)
	if err != nil || len(b) < 16 {
		return nil, fmt.Errorf("taskstore: shared secret %s: %w", name, ErrBadSharedSecret)
	}
	return b, nil
}

func isSyntaxError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "ERR syntax")
}

// IsAuthError reports whether err is Redis refusing the connection's
// credentials (a wrong password or user, or none given to a server that
// wants one): retrying will not help until the configuration changes.
func IsAuthError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
		strings.HasPrefix(msg, "ERR invalid password") || strings.HasPrefix(msg, "ERR AUTH") ||
		strings.HasPrefix(msg, "ERR Client sent AUTH")
}

// EvictionPolicy returns the server's maxmemory-policy (CONFIG GET), e.g.
// "noeviction". Anything else lets Redis drop tasks under memory pressure.
// On a Cluster it asks one node. Managed services that disable CONFIG make
// it return an error.
func EvictionPolicy(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	m, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", fmt.Errorf("taskstore: CONFIG GET maxmemory-policy: %w", err)
	}
	v, ok := m["maxmemory-policy"]
	if !ok {
		return "", errors.New("taskstore: CONFIG GET maxmemory-policy: no value")
	}
	return v, nil
}

// SetCursorKey replaces the key that signs tasks/list cursors
// (Config.CursorKey) for cursors issued and checked from now on; cursors
// issued before become ErrBadCursor. Keys shorter than 16 bytes are
// refused. It is safe for concurrent use.
func (s *Redis) SetCursorKey(key []byte) error {
	if len(key) < 16 {
		return errors.New("taskstore: SetCursorKey: key shorter than 16 bytes")
	}
	k := append([]byte(nil), key...)
	s.cursors.mac.Store(&k)
	return nil
}
