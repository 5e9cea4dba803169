package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

func runMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("members", "members list | add ID RAFT-ADDR API-ADDR | remove ID | transfer-leader [ID] [flags]\n\n"+
		"Lists or changes the cluster's voters. Changes go to the leader. A removal\n"+
		"that would leave too few reachable voters for a quorum is refused. A cluster\n"+
		"started with an admin token (serve --admin-token-file) wants it for add, remove\n"+
		"and transfer-leader: set FENCELOCK_ADMIN_TOKEN.", stderr)
	newClient := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErr("members: missing subcommand: list, add, remove or transfer-leader")
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	if err := parse(fs, rest); err != nil {
		return err
	}
	rest = fs.Args()
	c, err := newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if sub == "list" && len(rest) > 0 {
		return usageErr("members list takes no arguments, got %q", rest)
	}
	switch sub {
	case "list":
		st, err := anyStatus(ctx, c)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(st.Members)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRAFT\tAPI\tVOTER\tLEADER")
		for _, m := range st.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\n", m.ID, m.RaftAddr, m.APIAddr, m.Voter, m.Leader)
		}
		return tw.Flush()
	case "add":
		if len(rest) != 3 {
			return usageErr("members add ID RAFT-ADDR API-ADDR (the leader asks the new node's status at API-ADDR before it counts it as a voter)")
		}
		if err := adminOf(c).AddMember(ctx, rest[0], rest[1], rest[2]); err != nil {
			return err
		}
		return say(stdout, *asJSON, map[string]any{"added": rest[0], "raft_addr": rest[1], "api_addr": rest[2]},
			"added %s (%s)", rest[0], rest[1])
	case "remove":
		if len(rest) != 1 {
			return usageErr("members remove ID")
		}
		if err := adminOf(c).RemoveMember(ctx, rest[0]); err != nil {
			return err
		}
		return say(stdout, *asJSON, map[string]any{"removed": rest[0]}, "removed %s", rest[0])
	case "transfer-leader":
		id := ""
		if len(rest) == 1 {
			id = rest[0]
		} else if len(rest) > 1 {
			return usageErr("members transfer-leader [ID]")
		}
		leader, err := adminOf(c).TransferLeader(ctx, id)
		if err != nil {
			return err
		}
		return say(stdout, *asJSON, map[string]any{"leader_id": leader}, "leader is now %s", leader)
	default:
		return usageErr("members: unknown subcommand %q: list, add, remove or transfer-leader", sub)
	}
}

// say prints what a command did: doc as JSON with asJSON, else the line.
func say(w io.Writer, asJSON bool, doc map[string]any, format string, args ...any) error {
	if asJSON {
		return json.NewEncoder(w).Encode(doc)
	}
	_, err := fmt.Fprintf(w, format+"\n", args...)
	return err
}
