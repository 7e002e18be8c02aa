package redisstore

import (
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ParseClusterURL reads redis-cluster://[user:pass@]host1:port,host2:port,...
// into Cluster client options: the last '@' ends the credentials,
// "user:pass" sets both and a lone "pass" only the password, a trailing '/'
// is ignored, and every address must be host:port.
func ParseClusterURL(url string) (*redis.ClusterOptions, error) {
	rest, ok := strings.CutPrefix(url, "redis-cluster://")
	if !ok {
		return nil, fmt.Errorf("%q: want redis-cluster://host1:port,host2:port", url)
	}
	opts := &redis.ClusterOptions{}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, pass, hasPass := strings.Cut(rest[:at], ":")
		if hasPass {
			opts.Username, opts.Password = user, pass
		} else {
			opts.Password = user
		}
		rest = rest[at+1:]
	}
	rest = strings.TrimSuffix(rest, "/")
	for addr := range strings.SplitSeq(rest, ",") {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("cluster address %q: want host:port (redis-cluster://host1:port,host2:port)", addr)
		}
		opts.Addrs = append(opts.Addrs, addr)
	}
	return opts, nil
}
