package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
)

// anyStatus returns the status of the first endpoint that answers.
func anyStatus(ctx context.Context, c *client.Client) (fencelock.NodeStatus, error) {
	var errs []error
	for _, ep := range c.Endpoints() {
		st, err := adminOf(c).Status(ctx, ep)
		if err == nil {
			return st, nil
		}
		errs = append(errs, err)
	}
	return fencelock.NodeStatus{}, errors.Join(errs...)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [flags]\n\n"+
		"Shows the cluster's members, the leader and term, and each node's own view:\n"+
		"state, commit and applied index, version, and whether it answers.\n\n"+
		"Exit status: 0 when every member answers and there is a ready leader;\n"+
		"1 when a member does not answer or there is no ready leader (the table is\n"+
		"printed all the same); 4 when no node answers at all.", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("status takes no arguments")
	}
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	first, err := anyStatus(ctx, c)
	if err != nil {
		return err
	}
	var nodes []nodeView
	for _, m := range first.Members {
		v := nodeView{Member: m}
		if m.APIAddr == "" {
			v.Error = "API address not recorded yet"
		} else {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := adminOf(c).Status(pctx, m.APIAddr)
			pcancel()
			if err != nil {
				v.Error = err.Error()
			} else {
				v.Status = &nodeStatusJSON{NodeStatus: st, LastContact: st.LastContact.String()}
			}
		}
		nodes = append(nodes, v)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(map[string]any{"leader": first.LeaderID, "term": first.Term, "nodes": nodes}); err != nil {
			return err
		}
		return degraded(nodes)
	}
	fmt.Fprintf(stdout, "leader: %s   term: %d   members: %d   cluster: %s   epoch: %d\n\n",
		orNone(first.LeaderID), first.Term, len(first.Members), orNone(first.ClusterID), first.Epoch)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAPI\tRAFT\tSTATE\tTERM\tCOMMIT\tAPPLIED\tLAST CONTACT\tVERSION\tHEALTH")
	for _, n := range nodes {
		if n.Status == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\tunreachable (%s)\n", n.ID, n.APIAddr, n.RaftAddr, n.Error)
			continue
		}
		st := n.Status
		health := "ok"
		if st.State == "leader" && !st.Ready {
			health = "leader, re-arming leases"
		}
		contact := "-"
		if st.State != "leader" {
			contact = st.NodeStatus.LastContact.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", n.ID, n.APIAddr, n.RaftAddr, st.State, st.Term,
			st.CommitIndex, st.AppliedIndex, contact, orNone(st.Version), health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return degraded(nodes)
}

// degraded fails when a member did not answer or none is a ready leader:
// a script or probe running "fencelock status" sees it in the exit status.
func degraded(nodes []nodeView) error {
	var down []string
	leader := false
	for _, n := range nodes {
		if n.Status == nil {
			down = append(down, n.ID)
		} else if n.Status.State == "leader" && n.Status.Ready {
			leader = true
		}
	}
	switch {
	case len(down) > 0:
		return fmt.Errorf("status: %d of %d members do not answer: %s", len(down), len(nodes), strings.Join(down, ", "))
	case !leader:
		return errors.New("status: no member is a ready leader")
	}
	return nil
}

// nodeView is one member as status shows it: its own status, or why not.
type nodeView struct {
	fencelock.Member
	Status *nodeStatusJSON `json:"status,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// nodeStatusJSON is a node's status with its last contact as a duration
// string, as every command prints durations.
type nodeStatusJSON struct {
	fencelock.NodeStatus
	LastContact string `json:"last_contact"`
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
