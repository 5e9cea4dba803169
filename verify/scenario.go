package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Scenario is one fault schedule of the harness.
type Scenario struct {
	Name     string
	Number   string // "1".."6", "neg"
	Title    string
	Nodes    int // default cluster size
	MinNodes int
	// ServerFlags are extra "fencelock serve" flags for every node.
	ServerFlags []string
	// NoFencing makes every worker write with one constant token, as if
	// the resource did not fence: a negative control whose checkers must
	// find a violation.
	NoFencing bool
	// LateLease makes every worker hold each lease one TTL past the
	// client's deadline (a negative safety margin, lateLease): a negative
	// control whose lease checker must find a violation.
	LateLease bool
	// Caught names the checker that must find a violation: a negative
	// control ("" for a scenario that must pass).
	Caught  string
	nemesis func(ctx context.Context, e *env)
	// rewinds: the nemesis puts the lock table back to an earlier state (a
	// restore from a backup), so the lock service's linearizability does
	// not apply; the token and store checks do.
	rewinds bool
	// hook lists the idempotent nemesis-hook actions that stand for what
	// the nemesis does to an existing deployment's servers (start for
	// kill/start, resume for pause/resume, heal for isolate/heal); the
	// harness probes them first. A nemesis without hook actions cannot run
	// against an existing deployment.
	hook []string
	// zombie, for client slot 0, runs between its read and its write and
	// returns what to do after the write.
	zombie func(ctx context.Context, e *env, w *workerProc, cycle int) func()
	bit    func(r Result) Check
}

// Nemesis and Zombie are accessors used by the runner.
func (s Scenario) Nemesis(ctx context.Context, e *env) {
	if s.nemesis != nil {
		s.nemesis(ctx, e)
	}
}

func (s Scenario) Zombie(ctx context.Context, e *env, w *workerProc, cycle int) func() {
	return s.zombie(ctx, e, w, cycle)
}

// Bit checks that the scenario's faults really bit.
func (s Scenario) Bit(r Result) Check {
	c := Check{Name: "faults-bit", Valid: true, Checked: r.Ops}
	if r.Faults < 1 {
		c.problem("no fault was injected")
	}
	if r.Grants < 1 {
		c.problem("no lock was ever granted: the workload did nothing")
	}
	if r.Handovers < minHandovers {
		c.problem("only %d lease hand-overs checked (a grant whose holder reported its lease's end, then a later grant of the lock), want at least %d", r.Handovers, minHandovers)
	}
	if s.bit != nil {
		b := s.bit(r)
		for _, p := range b.Problems {
			c.problem("%s", p)
		}
	}
	return c
}

// minHandovers is the fewest lease hand-overs a run must check: a short
// run makes hundreds, and one that checked none proved nothing.
const minHandovers = 20

// pausesClients reports whether the scenario freezes client processes,
// which leaves their contexts live past the deadline (see LeaseOptions).
func (s Scenario) pausesClients() bool { return s.zombie != nil }

func need(what string, got, min int) func(*Check) {
	return func(c *Check) {
		if got < min {
			c.problem("want at least %d %s, observed %d", min, what, got)
		}
	}
}

func bits(fs ...func(r Result) func(*Check)) func(Result) Check {
	return func(r Result) Check {
		c := Check{Valid: true}
		for _, f := range fs {
			f(r)(&c)
		}
		return c
	}
}

var (
	leaderChange = func(r Result) func(*Check) { return need("leader change(s)", r.LeaderChanges, 1) }
	staleRefused = func(r Result) func(*Check) { return need("stale write(s) rejected", r.StaleRejected, 1) }
	leaseLost    = func(r Result) func(*Check) { return need("lost lease(s) (renew/release refused)", r.LeasesLost, 1) }
	lostHandover = func(r Result) func(*Check) {
		return need("lease hand-over(s) checked after a lost lease", r.HandoversLost, 1)
	}
	snapshotSeen = func(r Result) func(*Check) { return need("snapshot(s) taken", r.Snapshots, 1) }
	installed    = func(r Result) func(*Check) {
		return need("snapshot(s) installed on a follower by the leader (InstallSnapshot)", r.InstalledSnapshots, 1)
	}
	localRestore = func(r Result) func(*Check) {
		return need("restart(s) restoring the node's own snapshot", r.LocalRestores, 1)
	}
	memberChange = func(r Result) func(*Check) { return need("completed membership change(s)", r.MemberChanges, 1) }
	restored     = func(r Result) func(*Check) {
		return func(c *Check) {
			need("restore(s) of a backup", r.Restores, 1)(c)
			if r.RestoreFailures > 0 {
				c.problem("%d restore(s) failed: the node started empty, in epoch 0", r.RestoreFailures)
			}
		}
	}
)

// Scenarios returns the scenarios in their run order: 1-7 and the
// negative controls.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "kill", Number: "1", Title: "one node, kill -9 and restart every few seconds",
			Nodes: 1, MinNodes: 1, nemesis: killNodes, hook: []string{"start"}, bit: bits(leaderChange)},
		{Name: "partition", Number: "2", Title: "three nodes, silent partitions: isolate the leader, random halves, one-way",
			Nodes: 3, MinNodes: 3, nemesis: partitions, hook: []string{"heal"}, bit: bits(leaderChange)},
		{Name: "pause-leader", Number: "3", Title: "SIGSTOP/SIGCONT the leader for 1-3x the TTL",
			Nodes: 3, MinNodes: 3, nemesis: pauseLeader, hook: []string{"resume"}, bit: bits(leaderChange)},
		{Name: "zombie-client", Number: "4", Title: "SIGSTOP a client, or cut it from the lock service, between its acquire and its write, for longer than the TTL",
			Nodes: 1, MinNodes: 1, zombie: zombie, bit: bits(staleRefused, leaseLost, lostHandover)},
		{Name: "snapshot-kill", Number: "5", Title: "kill -9 a follower until the leader has compacted past it (InstallSnapshot), then the leader (local restore); small snapshot threshold",
			Nodes: 3, MinNodes: 3, nemesis: snapshotKills, hook: []string{"start"},
			bit:         bits(leaderChange, snapshotSeen, installed, localRestore),
			ServerFlags: []string{"--snapshot-threshold", "16", "--trailing-logs", strconv.Itoa(snapshotTrailingLogs), "--snapshot-interval", "100ms"}},
		{Name: "membership", Number: "6", Title: "five nodes, membership changes: remove a follower and re-join it wiped, transfer leadership, remove the leader, kill -9",
			Nodes: 5, MinNodes: 3, nemesis: membership, bit: bits(memberChange, leaderChange)},
		{Name: "restore", Number: "7", Title: "one node: back up, grant on, then wipe it and restore the backup (the next token epoch), again and again",
			Nodes: 1, MinNodes: 1, nemesis: restores, rewinds: true, bit: bits(restored)},
		{Name: "negative-control", Number: "neg", Title: "scenario 4 with fencing OFF (one constant token for every write): the checker must find the violation",
			Nodes: 1, MinNodes: 1, NoFencing: true, Caught: "store", zombie: zombie, bit: bits(leaseLost)},
		{Name: "negative-restore", Number: "neg7", Title: "scenario 7 restoring WITHOUT a new epoch: tokens issued after the backup come back, the checker must find it",
			Nodes: 1, MinNodes: 1, Caught: "tokens", nemesis: restores, rewinds: true, bit: bits(restored)},
		{Name: "negative-lease", Number: "negL", Title: "scenario 4 with every worker holding its lease one TTL past the client's deadline (a negative safety margin): the lease checker must find a grant made while the holder still held the lease",
			Nodes: 1, MinNodes: 1, LateLease: true, Caught: "lease", zombie: zombie, bit: bits(leaseLost, lostHandover)},
	}
}

// restores is scenario 7's nemesis: every 3-4 s it takes a backup of the
// one node, lets the workload grant on for 1.5-2.5 s (tokens the backup
// lacks), then kills the node, wipes its data dir and restores the backup
// into it ("fencelock snapshot restore": the next epoch, or the same one in
// the negative control) before starting it again.
func restores(ctx context.Context, e *env) {
	for sleep(ctx, e.between(3*time.Second, 4*time.Second)) {
		nd := e.cl.nodes[0]
		backup := filepath.Join(e.dir, fmt.Sprintf("backup-%d.fls", e.restores.Load()))
		if err := run(ctx, nd.bin, append([]string{"snapshot", "save", backup, "--server", nd.addr}, e.tls.cliArgs()...)...); err != nil {
			e.nemesis("backup failed: " + err.Error())
			continue
		}
		e.nemesis("backup taken: " + filepath.Base(backup))
		sleep(ctx, e.between(1500*time.Millisecond, 2500*time.Millisecond))
		e.killRestart(ctx, 0, func(ctx context.Context) {
			e.rewound()
			args := []string{"snapshot", "restore", backup, "--data-dir", nd.dataDir, "--node-id", nd.id, "--raft-addr", nd.raftAddr}
			if e.sc.Caught == "tokens" {
				args = append(args, "--unsafe-same-epoch")
			}
			err := os.RemoveAll(nd.dataDir)
			if err == nil {
				err = run(context.WithoutCancel(ctx), nd.bin, args...)
			}
			if err != nil {
				e.restoreFailures.Add(1)
				e.nemesis("restore failed: " + err.Error())
				return
			}
			e.restores.Add(1)
			e.nemesis("data dir wiped, " + filepath.Base(backup) + " restored")
		})
	}
}

// run runs the binary with args and returns its output in the error.
func run(ctx context.Context, bin string, args ...string) error {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Lookup finds a scenario by name or number.
func Lookup(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if strings.EqualFold(name, s.Name) || name == s.Number {
			return s, true
		}
	}
	return Scenario{}, false
}

// killNodes kills a random node with SIGKILL every 2-3 s and restarts it
// 0.5-1.5 s later on its data dir.
func killNodes(ctx context.Context, e *env) {
	for sleep(ctx, e.between(2*time.Second, 3*time.Second)) {
		i := e.intn(len(e.cl.nodes))
		e.killRestart(ctx, i, func(context.Context) { sleep(ctx, e.between(500*time.Millisecond, 1500*time.Millisecond)) })
	}
}

// killRestart kills node i, waits with down, and restarts it.
func (e *env) killRestart(ctx context.Context, i int, down func(ctx context.Context)) {
	nd := e.cl.nodes[i]
	if err := nd.kill9(); err != nil {
		e.nemesis("kill -9 " + nd.id + " failed: " + err.Error())
		return
	}
	e.faults.Add(1)
	e.nemesis("kill -9 " + nd.id)
	down(ctx)
	if err := nd.start(context.WithoutCancel(ctx)); err != nil {
		e.nemesis("restart " + nd.id + " failed: " + err.Error())
		return
	}
	e.nemesis("restarted " + nd.id)
}

// snapshotTrailingLogs is scenario 5's --trailing-logs: the log entries a
// node keeps behind its latest snapshot.
const snapshotTrailingLogs = 4

// snapshotKills is scenario 5's nemesis. Every 2-3 s it kills a node with
// SIGKILL, in turn: a follower, held down until the leader's latest
// snapshot is more than the trailing logs past the follower's last log
// entry (at most 6 s, and not past the run), so that the entries it lacks
// are compacted away and only InstallSnapshot can bring it back; then the
// leader, restarted 0.5-1.5 s later (it restores its own snapshot, and a
// new leader is elected meanwhile). Every restarted node had snapshots of
// its own, so restarts restore locally.
func snapshotKills(ctx context.Context, e *env) {
	for round := 0; sleep(ctx, e.between(2*time.Second, 3*time.Second)); round++ {
		l := e.cl.leader()
		if l < 0 {
			continue
		}
		if round%2 == 1 {
			e.killRestart(ctx, l, func(context.Context) { sleep(ctx, e.between(500*time.Millisecond, 1500*time.Millisecond)) })
			continue
		}
		f := e.follower(l)
		last, ok := e.status(ctx, f)
		if !ok {
			continue
		}
		e.killRestart(ctx, f, func(ctx context.Context) {
			// Without the workload (the run is over) the leader stops
			// snapshotting: wait no longer than the run.
			bg := context.WithoutCancel(ctx)
			deadline := time.Now().Add(6 * time.Second)
			for time.Now().Before(deadline) && sleep(ctx, 100*time.Millisecond) {
				cur := e.cl.leader()
				if cur < 0 || cur == f {
					continue
				}
				if st, ok := e.status(bg, cur); ok && st.LastSnapshotIndex > last.LastLogIndex+snapshotTrailingLogs+1 {
					e.nemesis(fmt.Sprintf("leader %s snapshotted at index %d, past %s's last entry %d plus %d trailing logs",
						e.cl.nodes[cur].id, st.LastSnapshotIndex, e.cl.nodes[f].id, last.LastLogIndex, snapshotTrailingLogs))
					return
				}
			}
			e.nemesis("the leader did not compact past " + e.cl.nodes[f].id + " within 6s")
		})
	}
}

// partitions cycles through three kinds of silent partition, each held for
// 2-3 s (several election timeouts) and then healed for 1.5-2.5 s.
func partitions(ctx context.Context, e *env) {
	for round := 0; sleep(ctx, e.between(1500*time.Millisecond, 2500*time.Millisecond)); round++ {
		l := e.cl.leader()
		if l < 0 {
			l = e.intn(len(e.cl.nodes))
		}
		var what string
		var err error
		switch round % 3 {
		case 0:
			err = e.cl.isolate(l)
			what = "isolate leader " + e.cl.nodes[l].id
		case 1:
			side := map[int]bool{}
			var ids []string
			for len(side) < len(e.cl.nodes)/2 {
				i := e.intn(len(e.cl.nodes))
				if !side[i] {
					side[i] = true
					ids = append(ids, e.cl.nodes[i].id)
				}
			}
			err = e.cl.split(side)
			what = "split minority {" + strings.Join(ids, ",") + "} from the rest"
		case 2:
			err = e.cl.cutOutbound(l)
			what = "one-way: leader " + e.cl.nodes[l].id + " cannot reach its peers, they reach it"
			if e.cl.external() {
				what = "isolate leader " + e.cl.nodes[l].id + " (the nemesis hook has no one-way cut)"
			}
		}
		if err != nil {
			e.nemesis("partition: " + what + " failed: " + err.Error())
		} else {
			e.faults.Add(1)
			e.nemesis("partition: " + what)
		}
		sleep(ctx, e.between(2*time.Second, 3*time.Second))
		if err := e.cl.heal(); err != nil {
			e.nemesis("heal failed: " + err.Error())
			continue
		}
		e.nemesis("heal")
	}
}

// pauseLeader freezes the leader with SIGSTOP for 1-3x the TTL.
func pauseLeader(ctx context.Context, e *env) {
	for sleep(ctx, e.between(1500*time.Millisecond, 2500*time.Millisecond)) {
		l := e.cl.leader()
		if l < 0 {
			continue
		}
		nd := e.cl.nodes[l]
		d := e.between(e.cfg.TTL, 3*e.cfg.TTL)
		if err := nd.signal(syscall.SIGSTOP); err != nil {
			if nd.external {
				e.nemesis("pause " + nd.id + " failed: " + err.Error())
			}
			continue
		}
		e.faults.Add(1)
		e.nemesis(fmt.Sprintf("SIGSTOP leader %s for %v", nd.id, d.Round(time.Millisecond)))
		sleep(context.WithoutCancel(ctx), d)
		if err := nd.signal(syscall.SIGCONT); err != nil {
			e.nemesis("SIGCONT " + nd.id + " failed: " + err.Error())
			continue
		}
		e.nemesis("SIGCONT " + nd.id)
	}
}

// zombie runs in client slot 0 between its read and its write (the classic
// scenario). Even cycles freeze the client process with SIGSTOP for 1.5-2.5x
// the TTL (its keep-alive freezes with it); odd cycles cut it from the lock
// service (not from the store) for as long, so it cannot renew, and it
// writes while still cut off. Either way its lease runs out, another client
// may take the lock and write, and then the zombie writes with its old
// token, never checking its lease first.
func zombie(ctx context.Context, e *env, w *workerProc, cycle int) func() {
	if ctx.Err() != nil {
		return nil
	}
	d := e.between(3*e.cfg.TTL/2, 5*e.cfg.TTL/2)
	e.faults.Add(1)
	if cycle%2 == 0 {
		w.signal(syscall.SIGSTOP)
		e.nemesis(fmt.Sprintf("SIGSTOP client process %d between its acquire and its write, for %v", w.process, d.Round(time.Millisecond)))
		sleep(context.WithoutCancel(ctx), d)
		w.signal(syscall.SIGCONT)
		e.nemesis(fmt.Sprintf("SIGCONT client process %d: it writes with its old token", w.process))
		return nil
	}
	w.partition(true)
	e.nemesis(fmt.Sprintf("cut client process %d from the lock service for %v (it still reaches the store)", w.process, d.Round(time.Millisecond)))
	sleep(context.WithoutCancel(ctx), d)
	return func() {
		w.partition(false)
		e.nemesis(fmt.Sprintf("heal client process %d's links to the lock service", w.process))
	}
}
