package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/client"
)

// anyStatus returns the status of the first endpoint that answers.
func anyStatus(ctx context.Context, c *client.Client) (client.NodeStatus, error) {
	var errs []error
	for _, ep := range c.Endpoints() {
		st, err := c.Status(ctx, ep)
		if err == nil {
			return st, nil
		}
		errs = append(errs, err)
	}
	return client.NodeStatus{}, errors.Join(errs...)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "status [flags]\n\n"+
		"Shows the cluster's members, the leader and term, and each node's own view:\n"+
		"state, commit and applied index, and whether it answers.", stderr)
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
	type nodeView struct {
		client.Member
		Status *client.NodeStatus `json:"status,omitempty"`
		Error  string             `json:"error,omitempty"`
	}
	var nodes []nodeView
	for _, m := range first.Members {
		v := nodeView{Member: m}
		if m.APIAddr == "" {
			v.Error = "API address not recorded yet"
		} else {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := c.Status(pctx, m.APIAddr)
			pcancel()
			if err != nil {
				v.Error = err.Error()
			} else {
				v.Status = &st
			}
		}
		nodes = append(nodes, v)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"leader": first.LeaderID, "term": first.Term, "nodes": nodes})
	}
	fmt.Fprintf(stdout, "leader: %s   term: %d   members: %d\n\n", orNone(first.LeaderID), first.Term, len(first.Members))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAPI\tRAFT\tSTATE\tTERM\tCOMMIT\tAPPLIED\tLAST CONTACT\tHEALTH")
	for _, n := range nodes {
		if n.Status == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\tunreachable (%s)\n", n.ID, n.APIAddr, n.RaftAddr, n.Error)
			continue
		}
		st := n.Status
		health := "ok"
		if st.State == "leader" && !st.Ready {
			health = "leader, re-arming leases"
		}
		contact := "-"
		if st.State != "leader" {
			contact = st.LastContact.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", n.ID, n.APIAddr, n.RaftAddr, st.State, st.Term,
			st.CommitIndex, st.AppliedIndex, contact, health)
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
