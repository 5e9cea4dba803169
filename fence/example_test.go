package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fence"
)

// A holder with token 34 writes; the paused holder with token 33 wakes up and
// is refused.
func ExampleMemory_Do() {
	ctx := context.Background()
	f := fence.NewMemory()
	report := ""
	write := func(text string) func(context.Context) error {
		return func(context.Context) error { report = text; return nil }
	}

	fmt.Println(f.Do(ctx, "report.pdf", 34, write("B's report")))
	err := f.Do(ctx, "report.pdf", 33, write("A's stale report"))
	var stale *fencelock.StaleTokenError
	fmt.Println(errors.As(err, &stale), stale.Token, stale.Highest)
	fmt.Println(report)
	// Output:
	// <nil>
	// true 33 34
	// B's report
}

func ExampleAdmit() {
	fmt.Println(fence.Admit("orders/42", 34, 34))
	fmt.Println(fence.Admit("orders/42", 34, 33))
	fmt.Println(errors.Is(fence.Admit("orders/42", 34, 0), fencelock.ErrMissingToken))
	// Output:
	// <nil>
	// stale fencing token 33 for domain "orders/42": highest accepted is 34
	// true
}
