package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/admin"
	"github.com/fencelock/fencelock/client"
)

// membership is scenario 6's nemesis. Every 1.5-2.5 s it does one of, in
// turn: remove a random follower, wipe its data dir and let it re-join
// with "fencelock serve --join"; transfer leadership to a random follower
// ("members transfer-leader"); kill -9 as many nodes as the cluster can
// lose and, while they are down, try to remove another one (the service
// must refuse: the rest would not be a quorum), then restart them; remove
// the leader itself (the rest must elect a new one), then wipe it and
// re-join it; kill -9 a random node and restart it on its data dir. Each
// change runs to completion (the node is back as a voter, a leader is
// ready) before the next, so the cluster never loses quorum through the
// nemesis alone. A removal the service refuses because it would break
// quorum (ErrPreconditionFailed) is an expected refusal, recorded, not a
// failure.
func membership(ctx context.Context, e *env) {
	cfg := client.DefaultConfig(e.cl.endpoints()...)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.AttemptTimeout = 2 * time.Second
	cfg.RetryTimeout = 5 * time.Second
	cfg.TLS = e.tls.clientTLS()
	c, err := client.NewFromConfig(cfg)
	if err != nil {
		e.nemesis("membership: no admin client: " + err.Error())
		return
	}
	defer c.Close()
	ac := admin.New(c, "")
	bg := context.WithoutCancel(ctx)
	for round := 0; sleep(ctx, e.between(1500*time.Millisecond, 2500*time.Millisecond)); round++ {
		l, err := e.cl.waitLeader(bg, -1, 15*time.Second)
		if err != nil {
			e.nemesis("membership: no ready leader, skipping a round")
			continue
		}
		switch round % 5 {
		case 0:
			f := e.follower(l)
			e.removeAndRejoin(bg, ac, f, "follower")
		case 1:
			f := e.follower(l)
			id := e.cl.nodes[f].id
			tctx, cancel := context.WithTimeout(bg, 5*time.Second)
			got, err := ac.TransferLeader(tctx, id)
			cancel()
			e.faults.Add(1)
			if err != nil {
				e.nemesis(fmt.Sprintf("transfer leadership %s -> %s failed: %v", e.cl.nodes[l].id, id, err))
				continue
			}
			e.nemesis(fmt.Sprintf("transfer leadership %s -> %s: new leader %s", e.cl.nodes[l].id, id, got))
		case 2:
			e.removeWhileDown(bg, ac, l)
		case 3:
			e.removeAndRejoin(bg, ac, l, "leader")
		case 4:
			i := e.intn(len(e.cl.nodes))
			nd := e.cl.nodes[i]
			nd.kill9()
			e.faults.Add(1)
			e.nemesis("kill -9 " + nd.id)
			sleep(bg, e.between(500*time.Millisecond, 1500*time.Millisecond))
			if err := nd.start(bg); err != nil {
				e.nemesis("restart " + nd.id + " failed: " + err.Error())
				continue
			}
			e.nemesis("restarted " + nd.id)
		}
	}
}

// removeWhileDown kills as many nodes as a quorum can spare ((n-1)/2),
// then asks to remove a live follower: with an odd n the rest would not be
// a quorum, so the service must refuse; if it does not (an even n), the
// removal runs to completion like any other. Then it restarts the killed
// nodes.
func (e *env) removeWhileDown(ctx context.Context, ac *admin.Client, l int) {
	n := len(e.cl.nodes)
	target := e.follower(l)
	var down []*node
	var ids []string
	for _, i := range e.perm(n) {
		if len(down) == (n-1)/2 {
			break
		}
		if i != target {
			down = append(down, e.cl.nodes[i])
			ids = append(ids, e.cl.nodes[i].id)
		}
	}
	for _, nd := range down {
		nd.kill9()
	}
	e.faults.Add(1)
	e.nemesis(fmt.Sprintf("kill -9 %s, then remove %s while they are down", strings.Join(ids, ","), e.cl.nodes[target].id))
	if _, err := e.cl.waitLeader(ctx, -1, 15*time.Second); err != nil {
		e.nemesis("no ready leader with " + strings.Join(ids, ",") + " down: " + err.Error())
	} else {
		e.removeAndRejoin(ctx, ac, target, "follower")
	}
	for _, nd := range down {
		if err := nd.start(ctx); err != nil {
			e.nemesis("restart " + nd.id + " failed: " + err.Error())
			continue
		}
		e.nemesis("restarted " + nd.id)
	}
}

// perm returns a random permutation of 0..n-1 drawn from the run's seed.
func (e *env) perm(n int) []int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.Perm(n)
}

// follower returns a random node other than l.
func (e *env) follower(l int) int {
	f := e.intn(len(e.cl.nodes) - 1)
	if f >= l {
		f++
	}
	return f
}

// removeAndRejoin removes node i from the configuration, kills it, wipes
// its data dir and starts it again with --join, then waits until it is a
// voter again.
func (e *env) removeAndRejoin(ctx context.Context, ac *admin.Client, i int, role string) {
	nd := e.cl.nodes[i]
	e.faults.Add(1)
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	err := ac.RemoveMember(rctx, nd.id)
	cancel()
	switch {
	case errors.Is(err, fencelock.ErrPreconditionFailed):
		e.refusals.Add(1)
		e.nemesis(fmt.Sprintf("remove %s %s: refused, it would break quorum (expected): %v", role, nd.id, err))
		return
	case err != nil:
		// Outcome unknown: look at the configuration.
		if in, ok := e.isMember(ctx, ac, nd.id); !ok || in {
			e.nemesis(fmt.Sprintf("remove %s %s failed: %v", role, nd.id, err))
			return
		}
	}
	e.members.Add(1)
	e.nemesis(fmt.Sprintf("removed %s %s from the cluster", role, nd.id))
	nd.kill9()
	if err := os.RemoveAll(nd.dataDir); err != nil {
		e.nemesis("wipe " + nd.id + ": " + err.Error())
	}
	if role == "leader" {
		if _, err := e.cl.waitLeader(ctx, i, 15*time.Second); err != nil {
			e.nemesis("no new leader after removing the leader: " + err.Error())
		} else {
			e.nemesis("a new leader was elected without " + nd.id)
		}
	}
	var via []string
	for j, o := range e.cl.nodes {
		if j != i {
			via = append(via, o.addr)
		}
	}
	nd.setJoin(strings.Join(via, ","))
	if err := nd.start(ctx); err != nil {
		e.nemesis("re-join " + nd.id + ": start failed: " + err.Error())
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if in, ok := e.isMember(ctx, ac, nd.id); ok && in {
			e.members.Add(1)
			e.nemesis(fmt.Sprintf("%s re-joined with a wiped data dir (fencelock serve --join)", nd.id))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.nemesis(nd.id + " did not re-join within 20s")
}

// isMember asks the current leader whether id is a voter; ok is false when
// no leader answered.
func (e *env) isMember(ctx context.Context, ac *admin.Client, id string) (in, ok bool) {
	l := e.cl.leader()
	if l < 0 {
		return false, false
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	st, err := ac.Status(sctx, e.cl.nodes[l].addr)
	cancel()
	if err != nil {
		return false, false
	}
	return slices.ContainsFunc(st.Members, func(m fencelock.Member) bool { return m.ID == id && m.Voter }), true
}

// setJoin makes the node's next start join the cluster through via instead
// of bootstrapping it.
func (n *node) setJoin(via string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var args []string
	for k := 0; k < len(n.args); k++ {
		if n.args[k] == "--bootstrap" || n.args[k] == "--join" {
			k++
			continue
		}
		args = append(args, n.args[k])
	}
	n.args = append(args, "--join", via)
}
