package libroute_test

import (
	"errors"
	"fmt"

	libroute "example.invalid/libroute/go"
)

// Route one request between a worker that caches most of its prompt and an idle one.
func Example() {
	policy, err := libroute.NewPolicy(`{"temperature": 0}`)
	if err != nil {
		panic(err)
	}
	defer policy.Close()
	selector, err := libroute.NewSelector(64, 12345)
	if err != nil {
		panic(err)
	}
	defer selector.Close()

	rows := []libroute.Row{
		{Worker: libroute.Worker{ID: 1}, Flags: libroute.RowHasCache | libroute.RowHasLoad,
			DeviceBlocks: 6, EffectiveBlocks: 6, EffectiveTokens: 96, ActiveDecodeBlocks: 4},
		{Worker: libroute.Worker{ID: 2}, Flags: libroute.RowHasLoad},
	}
	req := libroute.Request{PromptTokens: 128, BlockSize: 16, Role: libroute.RoleAggregated,
		TrackPrefillTokens: true, HasTierMatches: true}
	sel, err := selector.Select(policy, &req, rows)
	if err != nil {
		panic(err)
	}
	fmt.Printf("worker %d, cost %.1f, %d of %d blocks cached\n", sel.Worker.ID, sel.Cost, sel.CachedTokens/16, sel.RequestBlocks)
	// Output: worker 1, cost 6.0, 6 of 8 blocks cached
}

// Errors carry their status for errors.Is and libroute's detail in the message.
func ExampleError() {
	_, err := libroute.NewPolicy(`{"shared_cache_multiplier": 2}`)
	fmt.Println(errors.Is(err, libroute.StatusInvalidKnob))
	fmt.Println(err)
	// Output:
	// true
	// libroute: invalid shared_cache_multiplier = 2: must be within [0, 1]
}

// A router keeps the index and the ledger: KV events in, one call to route and book.
func ExampleRouter() {
	router, err := libroute.NewRouter(libroute.RouterConfig{BlockSlots: 1024, MaxWorkers: 64, RequestSlots: 256})
	if err != nil {
		panic(err)
	}
	defer router.Close()
	a, b := libroute.Worker{ID: 1}, libroute.Worker{ID: 2}
	_ = router.AddWorker(a)
	_ = router.AddWorker(b)
	// Worker 2 reports that it cached the first three blocks of a prompt.
	_ = router.ApplyKvEvents([]libroute.KvEvent{{Kind: libroute.KvStored, Worker: b, Tier: libroute.TierDevice, Hashes: []uint64{11, 12, 13}}})

	policy, _ := libroute.NewPolicy("")
	defer policy.Close()
	selector, _ := libroute.NewSelector(64, 1)
	defer selector.Close()
	req := libroute.Request{PromptTokens: 64, BlockSize: 16, Role: libroute.RoleAggregated, TrackPrefillTokens: true}
	rows := []libroute.Row{{Worker: a}, {Worker: b}}
	sel, err := router.Route(policy, selector, &req, []uint64{11, 12, 13, 14}, rows, 42, 0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("request 42 -> worker %d (%d blocks cached there)\n", sel.Worker.ID, rows[sel.Row].DeviceBlocks)
	_ = router.FreeRequest(42)
	// Output: request 42 -> worker 2 (3 blocks cached there)
}
