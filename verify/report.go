package verify

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable writes the results as a Markdown table, then the evidence of
// every failed check.
func WriteTable(w io.Writer, results []Result) {
	fmt.Fprintln(w, "| scenario | seed | nodes | time | ops | ok | fail | info | grants | faults | leader changes | snapshot restores local/installed | leases lost | stale writes rejected | lease hand-overs (after a loss) | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %s %s | %d | %d | - | - | - | - | - | - | - | - | - | - | - | - | SKIPPED |\n", r.Number(), r.Scenario, r.Seed, r.Nodes)
			continue
		}
		fmt.Fprintf(w, "| %s %s | %d | %d | %v | %d | %d | %d | %d | %d | %d | %d | %d/%d | %d | %d | %d (%d) | %s |\n",
			r.Number(), r.Scenario, r.Seed, r.Nodes, r.Duration, r.Ops, r.OK, r.Fail, r.Info, r.Grants, r.Faults,
			r.LeaderChanges, r.LocalRestores, r.InstalledSnapshots, r.LeasesLost, r.StaleRejected, r.Handovers, r.HandoversLost, r.Verdict)
	}
	var notes []string
	for _, r := range results {
		for _, c := range r.Checks {
			if c.Name == "lease" && c.Note != "" {
				notes = append(notes, fmt.Sprintf("  %s: %s", r.Scenario, c.Note))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nlease hand-overs:\n%s\n", strings.Join(notes, "\n"))
	}
	var skipped []string
	for _, r := range results {
		if r.Skipped != "" {
			skipped = append(skipped, fmt.Sprintf("  %s: %s", r.Scenario, r.Skipped))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped:\n%s\n", strings.Join(skipped, "\n"))
	}
	for _, r := range results {
		if r.Skipped != "" {
			continue
		}
		var lines []string
		for _, c := range append(append([]Check(nil), r.Checks...), r.Bit) {
			if !c.Valid || c.Unknown {
				lines = append(lines, "  "+strings.ReplaceAll(c.String(), "\n", "\n  "))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n%s (%s):\n%s\n", r.Scenario, r.Dir, strings.Join(lines, "\n"))
		}
	}
}

// Number returns the scenario's number ("1".."7", "neg", "neg7", "negL").
func (r Result) Number() string {
	if s, ok := Lookup(r.Scenario); ok {
		return s.Number
	}
	return ""
}
