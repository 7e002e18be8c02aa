package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the failover experiment needs from its cluster, and how it gets it
// without any script: before each run it waits until every node of the
// cluster serves its slots with a replica in sync; before the fault it
// notes how the master it will kill was started (its executable and the
// settings CONFIG GET reports), so that it can start the node again on
// the same directory, where the node finds its cluster configuration and
// rejoins as a replica.

// DefaultReadyTimeout is how long a failover run waits for the cluster to
// be ready (FailoverConfig.ReadyTimeout) when no other time is given.
const DefaultReadyTimeout = 60 * time.Second

// clusterState is what the readiness check saw: the nodes that serve
// slots, and the first reason the cluster is not ready ("" when it is).
type clusterState struct {
	nodes   []string // every address CLUSTER SLOTS names, masters first
	masters []string
	missing string
}

// checkCluster asks every node of the cluster (as the seed node's
// CLUSTER SLOTS names them) for its own view: every node must answer
// cluster_state:ok, list a replica for each slot range, and every replica
// must report master_link_status:up.
func checkCluster(ctx context.Context, opts *redis.ClusterOptions) clusterState {
	var st clusterState
	var seedErr error
	var slots []redis.ClusterSlot
	for _, addr := range opts.Addrs {
		c := nodeClient(opts, addr)
		//lint:ignore SA1019 CLUSTER SLOTS answers on Redis 6 as on 7; CLUSTER SHARDS (its successor) needs 7.
		slots, seedErr = c.ClusterSlots(ctx).Result()
		c.Close()
		if seedErr == nil {
			break
		}
	}
	if seedErr != nil {
		st.missing = fmt.Sprintf("no node of %s answers CLUSTER SLOTS (%v)", strings.Join(opts.Addrs, ","), seedErr)
		return st
	}
	seen := map[string]bool{}
	var replicas []string
	for _, s := range slots {
		for i, n := range s.Nodes {
			if seen[n.Addr] {
				continue
			}
			seen[n.Addr] = true
			if i == 0 {
				st.masters = append(st.masters, n.Addr)
			} else {
				replicas = append(replicas, n.Addr)
			}
		}
	}
	st.nodes = append(append([]string{}, st.masters...), replicas...)
	if len(slots) == 0 {
		st.missing = "the cluster serves no slot"
		return st
	}
	for _, addr := range st.nodes {
		if st.missing = nodeReady(ctx, opts, addr); st.missing != "" {
			return st
		}
	}
	return st
}

// nodeReady returns why the node at addr is not ready, or "".
func nodeReady(ctx context.Context, opts *redis.ClusterOptions, addr string) string {
	c := nodeClient(opts, addr)
	defer c.Close()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Sprintf("%s does not answer CLUSTER INFO (%v)", addr, err)
	}
	if infoField(info, "cluster_state") != "ok" {
		return fmt.Sprintf("%s reports cluster_state:%s", addr, infoField(info, "cluster_state"))
	}
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Sprintf("%s does not answer INFO replication (%v)", addr, err)
	}
	if infoField(repl, "role") == "slave" && infoField(repl, "master_link_status") != "up" {
		return fmt.Sprintf("the replica %s reports master_link_status:%s", addr, infoField(repl, "master_link_status"))
	}
	//lint:ignore SA1019 see checkCluster.
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Sprintf("%s does not answer CLUSTER SLOTS (%v)", addr, err)
	}
	for _, s := range slots {
		if len(s.Nodes) < 2 {
			// Redis lists a replica only once it has synced and its peers
			// have heard so (its replication offset, by the cluster bus):
			// a moment after master_link_status:up.
			return fmt.Sprintf("%s lists no replica for slots %d-%d (served by %s)", addr, s.Start, s.End, s.Nodes[0].Addr)
		}
	}
	return ""
}

// waitReady waits until checkCluster finds the cluster ready, at most
// timeout, writing a progress line to w when it starts waiting and every
// few seconds after. On timeout it returns what was still missing and why
// the experiment needs it.
func waitReady(ctx context.Context, opts *redis.ClusterOptions, timeout time.Duration, w io.Writer) (clusterState, error) {
	start := time.Now()
	var said time.Time
	for {
		st := checkCluster(ctx, opts)
		if st.missing == "" {
			if !said.IsZero() {
				fmt.Fprintf(w, "failover: the cluster is ready after %.1fs\n", time.Since(start).Seconds())
			}
			return st, nil
		}
		waited := time.Since(start)
		if said.IsZero() || time.Since(said) >= 5*time.Second {
			fmt.Fprintf(w, "failover: waiting for the cluster (%.0fs of at most %s): %s\n", waited.Seconds(), timeout, st.missing)
			said = time.Now()
		}
		if waited >= timeout {
			return st, fmt.Errorf("failover: the cluster was not ready within %s: %s. The experiment needs a Redis Cluster "+
				"whose every master has a replica in sync, so that the master it kills has a replica to take over", timeout, st.missing)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// infoField returns the value of name in an INFO or CLUSTER INFO answer.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// nodeClient returns a client of the one node at addr.
func nodeClient(opts *redis.ClusterOptions, addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Username: opts.Username, Password: opts.Password,
		TLSConfig: opts.TLSConfig, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// localNode returns the process id of the node at addr and checks that it
// is a Redis process on this machine that this process may signal: the
// experiment stops and kills nodes by their process id.
func localNode(ctx context.Context, opts *redis.ClusterOptions, addr string) (int, error) {
	pid, err := nodePID(ctx, opts, addr)
	if err != nil {
		return 0, err
	}
	need := "the experiment stops and kills the room's nodes by their process id (SIGSTOP, SIGKILL), so the cluster must run on this machine, " +
		"as this user or one it may signal"
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, fmt.Errorf("failover: %s reports process id %d, which this process cannot signal (%v): %s", addr, pid, err, need)
	}
	// Redis names its process "redis-server HOST:PORT [cluster]"; a pid of
	// a node on another machine would name something else here.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		_, port, _ := net.SplitHostPort(addr)
		if !strings.Contains(string(cmdline), ":"+port) {
			return 0, fmt.Errorf("failover: %s reports process id %d, but that process here is %q, not the node: %s",
				addr, pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), need)
		}
	}
	return pid, nil
}

// nodeStart is how to start a node again as it was started: the
// redis-server executable and its arguments.
type nodeStart struct {
	path string
	args []string // args[0] is "redis-server"
}

// restartSettings are the settings a restarted node takes over from the
// one that was killed; multi marks those whose value is a list of words.
// Empty values are passed only for keepEmpty settings (save "" turns
// snapshots off; an empty logfile is standard output).
var restartSettings = []struct {
	name             string
	multi, keepEmpty bool
}{
	{name: "port"}, {name: "bind", multi: true}, {name: "dir"},
	{name: "cluster-enabled"}, {name: "cluster-config-file"}, {name: "cluster-node-timeout"},
	{name: "cluster-port"}, {name: "cluster-announce-ip"}, {name: "cluster-announce-port"},
	{name: "cluster-announce-bus-port"}, {name: "cluster-require-full-coverage"},
	{name: "cluster-allow-reads-when-down"}, {name: "cluster-replica-validity-factor"},
	{name: "appendonly"}, {name: "appendfilename"}, {name: "appenddirname"},
	{name: "save", multi: true, keepEmpty: true}, {name: "dbfilename"},
	{name: "logfile", keepEmpty: true}, {name: "pidfile"},
	{name: "requirepass"}, {name: "masteruser"}, {name: "masterauth"}, {name: "protected-mode"},
	{name: "repl-diskless-sync"}, {name: "repl-diskless-sync-delay"}, {name: "repl-backlog-size"},
	{name: "maxmemory"}, {name: "maxmemory-policy"},
}

// readNodeStart notes how the node at addr (process pid) was started: its
// executable (the process's own, else the one INFO reports, else
// redis-server on the PATH) and its settings from CONFIG GET, with
// daemonize on so that the started node does not depend on this process.
func readNodeStart(ctx context.Context, opts *redis.ClusterOptions, addr string, pid int) (nodeStart, error) {
	c := nodeClient(opts, addr)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nodeStart{}, fmt.Errorf("failover: INFO server on %s: %w", addr, err)
	}
	path, err := redisExecutable(pid, infoField(info, "executable"))
	if err != nil {
		return nodeStart{}, fmt.Errorf("failover: %s: %w", addr, err)
	}
	args := []string{"redis-server"}
	if f := infoField(info, "config_file"); f != "" {
		args = append(args, f)
	}
	for _, s := range restartSettings {
		kv, err := c.ConfigGet(ctx, s.name).Result()
		if err != nil {
			return nodeStart{}, fmt.Errorf("failover: CONFIG GET %s on %s: %w (the experiment restarts the killed node "+
				"with the settings it reports; give a command that does it instead)", s.name, addr, err)
		}
		v, ok := kv[s.name]
		if !ok || (v == "" && !s.keepEmpty) {
			continue
		}
		args = append(args, "--"+s.name)
		if s.multi && v != "" {
			args = append(args, strings.Fields(v)...)
		} else {
			args = append(args, v)
		}
	}
	args = append(args, "--daemonize", "yes")
	return nodeStart{path: path, args: args}, nil
}

// redisExecutable finds the executable to start a node with: the running
// node's own (by /proc, which holds the file even where redis-server is a
// link to another name), else the path INFO reported if it exists, else
// redis-server on the PATH.
func redisExecutable(pid int, reported string) (string, error) {
	if p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && !strings.HasSuffix(p, " (deleted)") {
		return p, nil
	}
	if reported != "" && filepath.IsAbs(reported) {
		if fi, err := os.Stat(reported); err == nil && !fi.IsDir() {
			return reported, nil
		}
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("no redis-server executable found (not the node's own, nor INFO's, nor on the PATH) to start the killed node again; " +
			"give the command that starts it instead (--restart-cmd)")
	}
	return p, nil
}

// start starts the node and waits, at most timeout, until it answers
// PING at addr.
func (s nodeStart) start(ctx context.Context, opts *redis.ClusterOptions, addr string, timeout time.Duration) error {
	cmd := exec.Command(s.path)
	cmd.Args = s.args // argv[0] "redis-server": one executable may serve several names
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failover: start %s again (%s %s): %w\n%s", addr, s.path, strings.Join(s.args[1:], " "), err, out)
	}
	return waitPing(ctx, opts, addr, timeout)
}

// restartByCommand runs the user's restart command for the node at addr
// ("{port}" replaced by its port) and waits until the node answers PING.
func restartByCommand(ctx context.Context, opts *redis.ClusterOptions, line, addr string, timeout time.Duration) error {
	_, port, _ := net.SplitHostPort(addr)
	line = strings.ReplaceAll(line, "{port}", port)
	if out, err := exec.CommandContext(ctx, "sh", "-c", line).CombinedOutput(); err != nil {
		return fmt.Errorf("failover: the restart command %q: %w\n%s", line, err, out)
	}
	return waitPing(ctx, opts, addr, timeout)
}

// waitPing waits until the node at addr answers PING, at most timeout.
func waitPing(ctx context.Context, opts *redis.ClusterOptions, addr string, timeout time.Duration) error {
	c := nodeClient(opts, addr)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failover: %s did not answer within %s of its restart: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepareFailover checks, before the first run, what a failover run
// needs: the cluster ready (waitReady), every node a Redis process on this
// machine, and a way to start a killed master again (the given command, or
// the node's executable, settings and directory).
func prepareFailover(ctx context.Context, cfg FailoverConfig, w io.Writer) error {
	st, err := waitReady(ctx, cfg.Cluster, cfg.readyTimeout(), w)
	if err != nil {
		return err
	}
	for _, addr := range st.nodes {
		pid, err := localNode(ctx, cfg.Cluster, addr)
		if err != nil {
			return err
		}
		if cfg.Restart == "" {
			s, err := readNodeStart(ctx, cfg.Cluster, addr, pid)
			if err != nil {
				return err
			}
			if _, err := os.Stat(s.dir()); err != nil {
				return fmt.Errorf("failover: %s works in %s, which this process cannot see (%v): the experiment starts a killed node "+
					"again on its directory; give the command that starts it instead (--restart-cmd)", addr, s.dir(), err)
			}
		}
	}
	fmt.Fprintf(w, "failover: %d masters with a replica each, on this machine; a killed master is started again %s\n",
		len(st.masters), cfg.restartHow())
	return nil
}

// dir returns the node's working directory among s.args.
func (s nodeStart) dir() string {
	for i, a := range s.args {
		if a == "--dir" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return "."
}

// readyTimeout is cfg.ReadyTimeout or DefaultReadyTimeout.
func (c FailoverConfig) readyTimeout() time.Duration {
	if c.ReadyTimeout > 0 {
		return c.ReadyTimeout
	}
	return DefaultReadyTimeout
}

// restartHow says how a killed node is started again.
func (c FailoverConfig) restartHow() string {
	if c.Restart != "" {
		return "by " + strconv.Quote(c.Restart)
	}
	return "by the experiment, with the executable and settings it ran with"
}
