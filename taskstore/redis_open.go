package taskstore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timeouts Open applies when the URL does not set them. The read and
// write timeouts are a backstop: every store operation carries its own
// deadline (Config.OpTimeout, --store-timeout; at least 30 s for one that
// moves a large payload), and go-redis applies the earlier of the two
// (ContextTimeoutEnabled), so they must not be shorter than the longest
// operation's.
const (
	DefaultDialTimeout  = 5 * time.Second
	DefaultReadTimeout  = time.Minute
	DefaultWriteTimeout = time.Minute
)

// Open returns a go-redis client for rawURL, with ContextTimeoutEnabled and
// dial/read/write timeouts (DefaultDialTimeout etc. unless the URL sets
// dial_timeout, read_timeout, write_timeout). It does not connect; the
// caller closes the client. Accepted forms:
//
//	redis://[user:pass@]host:port[/db][?opt=v...]     one server (redis.ParseURL)
//	rediss://...                                      same over TLS
//	unix://[user:pass@]/path/to/redis.sock[?db=N]     one server over a socket
//	redis+cluster://[user:pass@]host:port[,host:port...][?opt=v...]
//	rediss+cluster://...                              Cluster (redis.ParseClusterURL)
//	redis+sentinel://[user:pass@]host:port[,host:port...]/mastername[/db][?opt=v...]
//	rediss+sentinel://...                             Sentinel (redis.ParseFailoverURL)
//
// In the sentinel form the hosts are the sentinels, user:pass are the
// credentials of the Redis master/replicas, and the query parameters
// sentinel_username and sentinel_password (if any) those of the sentinels.
// Options are go-redis's snake_case query parameters (pool_size,
// max_retries, read_timeout=2s, ...); unknown ones are an error. Two
// more are taskgate's own, read by ReplicaWait and ignored here:
// wait_replicas=N|all and wait_timeout=D (Config.WaitReplicas,
// WaitTimeout); for a Sentinel URL, SentinelOptions gives
// Config.Sentinels.
func Open(rawURL string) (redis.UniversalClient, error) {
	rawURL, _, err := splitWaitParams(rawURL)
	if err != nil {
		return nil, fmt.Errorf("taskstore: open: %w", err)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("taskstore: open: %q is not a URL", redactURL(rawURL))
	}
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("taskstore: open %s: %w", redactURL(rawURL), err)
		}
		clientDefaults(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.Dialer, o.TLSConfig != nil)
		return redis.NewClient(o), nil
	case "redis+cluster", "rediss+cluster":
		u, err := multiHostURL(strings.TrimSuffix(scheme, "+cluster"), rest, nil)
		if err != nil {
			return nil, fmt.Errorf("taskstore: open %s: %w", redactURL(rawURL), err)
		}
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("taskstore: open %s: %w", redactURL(rawURL), err)
		}
		clientDefaults(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.Dialer, o.TLSConfig != nil)
		return redis.NewClusterClient(o), nil
	case "redis+sentinel", "rediss+sentinel":
		o, err := parseSentinelURL(scheme, rest)
		if err != nil {
			return nil, fmt.Errorf("taskstore: open %s: %w", redactURL(rawURL), err)
		}
		clientDefaults(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.Dialer, o.TLSConfig != nil)
		return redis.NewFailoverClient(o), nil
	default:
		return nil, fmt.Errorf("taskstore: open %s: unsupported scheme %q", redactURL(rawURL), scheme)
	}
}

// SentinelOptions returns the parsed form of a Sentinel URL accepted by
// Open (the master's name, the sentinels and their credentials), for
// Config.Sentinels; nil for any other URL.
func SentinelOptions(rawURL string) (*redis.FailoverOptions, error) {
	rawURL, _, err := splitWaitParams(rawURL)
	if err != nil {
		return nil, fmt.Errorf("taskstore: %w", err)
	}
	scheme, rest, _ := strings.Cut(rawURL, "://")
	if scheme != "redis+sentinel" && scheme != "rediss+sentinel" {
		return nil, nil
	}
	o, err := parseSentinelURL(scheme, rest)
	if err != nil {
		return nil, fmt.Errorf("taskstore: %s: %w", redactURL(rawURL), err)
	}
	return o, nil
}

func parseSentinelURL(scheme, rest string) (*redis.FailoverOptions, error) {
	u, err := multiHostURL(strings.TrimSuffix(scheme, "+sentinel"), rest, sentinelRewrite)
	if err != nil {
		return nil, err
	}
	return redis.ParseFailoverURL(u)
}

// opaqueDialer dials like go-redis's default dialer for plain TCP and unix
// sockets, but hands go-redis a connection that hides its file descriptor.
// go-redis's pool checks a connection with a non-blocking
// recvfrom(MSG_PEEK) system call and a deadline reset before every command
// when it can reach the descriptor (to spot a connection the server closed
// while it sat idle); that was the third system call of every store
// operation, about 5% of taskgate's CPU under tasks/get load. Without the
// check, a command on a connection the server closed fails with EOF and
// go-redis retries it on a fresh connection (MaxRetries), exactly as it
// does for TLS connections, which it cannot peek at either. Redis closes idle
// clients only when its timeout setting is non-zero (default 0), and
// go-redis drops connections idle for ConnMaxIdleTime (30 min) itself.
func opaqueDialer(timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	d := &net.Dialer{
		Timeout:         timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3},
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return opaqueConn{c}, nil
	}
}

// opaqueConn is a net.Conn without SyscallConn or NetConn methods.
type opaqueConn struct{ net.Conn }

// clientDefaults sets what Open gives every kind of client (one server,
// Cluster, Sentinel; their options are distinct types with the same
// fields): context timeouts on, DefaultDialTimeout etc. where the URL set
// none, and opaqueDialer for connections without TLS unless a dialer is
// set already.
func clientDefaults(ctxTimeout *bool, dial, read, write *time.Duration, dialer *func(context.Context, string, string) (net.Conn, error), tls bool) {
	*ctxTimeout = true
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{dial, DefaultDialTimeout}, {read, DefaultReadTimeout}, {write, DefaultWriteTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if !tls && *dialer == nil {
		*dialer = opaqueDialer(*dial)
	}
}

// multiHostURL turns "userinfo@h1:p1,h2:p2/path?query" into the single-host
// form go-redis parses: scheme://userinfo@h1:p1/path?query&addr=h2:p2.
// rewrite, if set, may adjust userinfo, path and query first.
func multiHostURL(scheme, rest string, rewrite func(user *url.Userinfo, path string, q url.Values) (*url.Userinfo, string, error)) (string, error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	var user *url.Userinfo
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		// Let net/url decode the userinfo (percent-escapes).
		u, err := url.Parse("x://" + authority[:i+1] + "h")
		if err != nil {
			return "", fmt.Errorf("bad userinfo: %w", err)
		}
		user, authority = u.User, authority[i+1:]
	}
	hosts := strings.Split(authority, ",")
	for _, h := range hosts {
		if h == "" {
			return "", fmt.Errorf("empty host in host list")
		}
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", fmt.Errorf("bad query: %w", err)
	}
	if rewrite != nil {
		if user, path, err = rewrite(user, path, q); err != nil {
			return "", err
		}
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := url.URL{Scheme: scheme, User: user, Host: hosts[0], Path: path, RawQuery: q.Encode()}
	return u.String(), nil
}

// sentinelRewrite maps /master[/db] to master_name (and the db path), the
// URL's credentials to the data nodes' username/password parameters, and
// sentinel_username/sentinel_password to the userinfo go-redis reads as
// sentinel credentials.
func sentinelRewrite(user *url.Userinfo, path string, q url.Values) (*url.Userinfo, string, error) {
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, "", fmt.Errorf("sentinel URL needs /mastername[/db], got %q", path)
	}
	q.Set("master_name", parts[0])
	db := ""
	if len(parts) == 2 {
		db = "/" + parts[1]
	}
	if user != nil {
		if n := user.Username(); n != "" {
			q.Set("username", n)
		}
		if p, ok := user.Password(); ok {
			q.Set("password", p)
		}
	}
	su, sp := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	switch {
	case sp != "":
		return url.UserPassword(su, sp), db, nil
	case su != "":
		return url.User(su), db, nil
	}
	return nil, db, nil
}

// redactURL drops the password from a URL for error messages.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "<invalid>"
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		return scheme + "://<redacted>@" + rest[i+1:]
	}
	return raw
}
