package libroute

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

var workerA, workerB = Worker{ID: 1}, Worker{ID: 2}

func newTestRouter(t *testing.T, tombstones int) *Router {
	t.Helper()
	r, err := NewRouter(RouterConfig{BlockSlots: 64, MaxWorkers: 64, RequestSlots: 64, Tombstones: tombstones})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRouteFollowsTheCachedPrefixAndBooks(t *testing.T) {
	router := newTestRouter(t, 0)
	defer router.Close()
	for _, w := range []Worker{workerA, workerB} {
		if err := router.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := router.ApplyKvEvents([]KvEvent{{Kind: KvStored, Worker: workerB, Tier: TierDevice, Hashes: []uint64{11, 12, 13}}}); err != nil {
		t.Fatal(err)
	}
	policy, _ := NewPolicy("")
	defer policy.Close()
	selector, _ := NewSelector(16, 1)
	defer selector.Close()
	req := Request{PromptTokens: 64, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	rows := []Row{{Worker: workerA}, {Worker: workerB}}
	sel, err := router.Route(policy, selector, &req, []uint64{11, 12, 13, 14}, rows, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 4 blocks. Worker 2 holds 3: 1 block to prefill + 1 new decode block = 2; worker 1: 4 + 4.
	costs, _ := selector.LastCosts()
	if sel.Worker != workerB || fmt.Sprint(costs) != "[{0 8} {1 2}]" || rows[1].DeviceBlocks != 3 {
		t.Fatalf("selection %+v, costs %v, rows %+v", sel, costs, rows)
	}
	if c, _ := router.Counters(); c.Blocks != 3 || c.ActiveRequests != 1 {
		t.Errorf("counters %+v", c)
	}
	if _, err := router.Route(policy, selector, &req, nil, rows, 7, 0); !errors.Is(err, StatusDuplicateRequest) {
		t.Errorf("duplicate: %v", err)
	}
	if err := router.PrefillComplete(7); err != nil {
		t.Error(err)
	}
	if err := router.FreeRequest(7); err != nil {
		t.Error(err)
	}
	if err := router.FreeRequest(7); !errors.Is(err, StatusUnknownRequest) {
		t.Errorf("second free: %v", err)
	}
}

func TestSnapshotRestore(t *testing.T) {
	a, b := newTestRouter(t, 8), newTestRouter(t, 8)
	defer a.Close()
	defer b.Close()
	for _, w := range []Worker{workerA, workerB} {
		if err := a.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.ApplyKvEvents([]KvEvent{{Kind: KvStored, Worker: workerB, Tier: TierDevice, Hashes: []uint64{11, 12, 13}}}); err != nil {
		t.Fatal(err)
	}
	policy, _ := NewPolicy("")
	defer policy.Close()
	selector, _ := NewSelector(16, 1)
	defer selector.Close()
	req := Request{PromptTokens: 64, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	route := func(r *Router, id uint64) (Selection, []Row) {
		rows := []Row{{Worker: workerA}, {Worker: workerB}}
		sel, err := r.Route(policy, selector, &req, []uint64{11, 12, 13, 14}, rows, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		return sel, rows
	}
	route(a, 7)
	snapshot, err := a.Snapshot()
	if err != nil || len(snapshot) == 0 {
		t.Fatalf("snapshot: %d bytes, %v", len(snapshot), err)
	}
	var e *Error
	if err := b.Restore(snapshot[:len(snapshot)-1]); !errors.As(err, &e) || e.Status != StatusInvalidArgument {
		t.Fatalf("cut snapshot: %v", err)
	}
	if c, _ := b.Counters(); c.LedgerWorkers != 0 {
		t.Errorf("a cut snapshot changed the router: %+v", c)
	}
	if err := b.Restore(snapshot); err != nil {
		t.Fatal(err)
	}
	ca, _ := a.Counters()
	cb, _ := b.Counters()
	if ca != cb {
		t.Errorf("counters %+v, restored %+v", ca, cb)
	}
	sa, ra := route(a, 8)
	sb, rb := route(b, 8)
	if sa.Worker != sb.Worker || fmt.Sprint(ra) != fmt.Sprint(rb) {
		t.Errorf("next route %+v %v, restored %+v %v", sa, ra, sb, rb)
	}
	if err := b.FreeRequest(7); err != nil {
		t.Errorf("the booking made before the snapshot: %v", err)
	}
	if err := b.ReadKvBatches(16, 64); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Snapshot(); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("a router reading engines' batches: %v", err)
	}
}

func TestReplicaEventsAreIdempotent(t *testing.T) {
	router := newTestRouter(t, 8)
	defer router.Close()
	_ = router.AddWorker(workerA)
	booked := LedgerEvent{Kind: LedgerBooked, ID: 5, Worker: workerA, PrefillTokens: 64, Blocks: 4}
	if err := router.ApplyLedgerEvents([]LedgerEvent{booked, booked, {Kind: LedgerFreed, ID: 5}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := router.Counters(); c.ActiveRequests != 0 || c.DuplicateLedgerEvents != 1 {
		t.Errorf("counters %+v", c)
	}
}

func TestRouterBadInputAndClose(t *testing.T) {
	var e *Error
	if _, err := NewRouter(RouterConfig{BlockSlots: 100, MaxWorkers: 64, RequestSlots: 64}); !errors.As(err, &e) || e.Status != StatusInvalidArgument {
		t.Errorf("bad block_slots: %v", err)
	}
	router := newTestRouter(t, 0)
	if err := router.Book(1, workerA, 16, 1); !errors.Is(err, StatusUnknownWorker) {
		t.Errorf("unknown worker: %v", err)
	}
	if err := router.ApplyKvEvents([]KvEvent{{Kind: 9, Worker: workerA}}); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("bad kind: %v", err)
	}
	router.Close()
	router.Close()
	if _, err := router.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

// A self-calibrating host: timed bookings and completions teach the router each worker's speed;
// the ttft policy reads it from the rows RouteAt fills.
func TestTimedRoutingCalibratesTheTtftPolicy(t *testing.T) {
	router := newTestRouter(t, 0)
	defer router.Close()
	for _, w := range []Worker{workerA, workerB} {
		if err := router.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	// Worker B takes three times as long as worker A for the same prompt.
	for id := uint64(0); id < 40; id++ {
		w, slow := workerA, 1.0
		if id%2 == 1 {
			w, slow = workerB, 3.0
		}
		tokens := 200 + id*50
		now := float64(id) * 1000
		if err := router.BookAt(id, w, tokens, 2, now); err != nil {
			t.Fatal(err)
		}
		if err := router.PrefillCompleteAt(id, now+slow*(10+0.05*float64(tokens))); err != nil {
			t.Fatal(err)
		}
		if err := router.FreeRequest(id); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := NewPolicy(`{"type": "ttft"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer policy.Close()
	selector, _ := NewSelector(16, 1)
	defer selector.Close()
	req := Request{PromptTokens: 1000, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	rows := []Row{{Worker: workerA}, {Worker: workerB}}
	sel, err := router.RouteAt(policy, selector, &req, []uint64{5, 6}, rows, 100, 50000)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Worker != workerA || rows[0].Flags&RowHasSpeed == 0 || !(rows[1].MsPerPrefillToken > 2*rows[0].MsPerPrefillToken) {
		t.Fatalf("selection %+v, rows %+v", sel, rows)
	}
	if err := router.PrefillCompleteAt(100, -1); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("negative time: %v", err)
	}
	if _, err := router.RouteAt(policy, selector, &req, nil, rows, 101, math.NaN()); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("NaN time: %v", err)
	}
}

// storedPayload is vLLM's msgpack payload [ts, [["BlockStored", [11, 12], nil, tokens 1..32, 16,
// nil, "GPU"]]].
func storedPayload() []byte {
	p := []byte{0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x97, 0xab}
	p = append(p, "BlockStored"...)
	p = append(p, 0x92, 11, 12, 0xc0, 0xdc, 0, 32)
	for t := byte(1); t <= 32; t++ {
		p = append(p, t)
	}
	return append(p, 16, 0xc0, 0xa3, 'G', 'P', 'U')
}

func TestEngineKvBatches(t *testing.T) {
	router := newTestRouter(t, 0)
	defer router.Close()
	payload := storedPayload()
	if _, err := router.ApplyKvBatch(workerA, payload); !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("before ReadKvBatches: %v", err)
	}
	if err := router.ReadKvBatches(16, 64); err != nil {
		t.Fatal(err)
	}
	_, err := router.ApplyKvBatch(workerA, payload[:40])
	var e *Error
	if !errors.As(err, &e) || e.Detail != "KV event payload, byte 40: the payload ends inside a value" {
		t.Fatalf("truncated: %v", err)
	}
	if c, _ := router.Counters(); c.Blocks != 0 {
		t.Fatalf("a refused payload changed the index: %+v", c)
	}
	s, err := router.ApplyKvBatch(workerA, payload)
	if err != nil || s.StoredBlocks != 2 || s.Events != 1 || s.Worker != workerA {
		t.Fatalf("summary %+v, %v", s, err)
	}
	tokens := make([]uint32, 33)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	hashes, err := BlockHashes(tokens, 16, "")
	if err != nil || len(hashes) != 2 {
		t.Fatalf("hashes %v, %v", hashes, err)
	}
	if lora, _ := BlockHashes(tokens, 16, "adapter-7"); lora[0] == hashes[0] {
		t.Error("a LoRA adapter's hashes equal the base model's")
	}
	if _, err := BlockHashes(tokens, 0, ""); !errors.As(err, &e) || e.Status != StatusInvalidArgument ||
		e.Detail != "block_size must be at least 1 token" {
		t.Errorf("block size 0: %v", err)
	}
	policy, _ := NewPolicy("")
	defer policy.Close()
	selector, _ := NewSelector(16, 1)
	defer selector.Close()
	req := Request{PromptTokens: 32, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	if err := router.AddWorker(workerA); err != nil {
		t.Fatal(err)
	}
	if err := router.AddWorker(workerB); err != nil {
		t.Fatal(err)
	}
	rows := []Row{{Worker: workerB}, {Worker: workerA}}
	sel, err := router.Route(policy, selector, &req, hashes, rows, 1, 0)
	if err != nil || sel.Worker != workerA || sel.CachedTokens != 32 {
		t.Fatalf("selection %+v, %v", sel, err)
	}
}

func TestRouteFleetRoutesAsRowsDo(t *testing.T) {
	overRows, overFleet := newTestRouter(t, 8), newTestRouter(t, 8)
	defer overRows.Close()
	defer overFleet.Close()
	policy, _ := NewPolicy("")
	defer policy.Close()
	selA, _ := NewSelector(64, 3)
	defer selA.Close()
	selB, _ := NewSelector(64, 3)
	defer selB.Close()
	req := Request{PromptTokens: 96, BlockSize: 16, Role: RoleAggregated, TrackPrefillTokens: true}
	if _, err := overFleet.RouteFleet(policy, selB, &req, nil, 1, 0); !errors.Is(err, StatusNoEndpoints) {
		t.Fatalf("empty fleet: %v", err)
	}
	hashes := []uint64{1, 2, 3, 4, 5, 6}
	var rows []Row
	for w := uint64(0); w < 6; w++ {
		rows = append(rows, Row{Worker: Worker{ID: w}})
	}
	// Added out of order: the fleet keeps its rows sorted by worker, as rows are here.
	for _, w := range []uint64{4, 1, 5, 0, 3, 2} {
		for _, r := range []*Router{overRows, overFleet} {
			if err := r.AddWorker(Worker{ID: w}); err != nil {
				t.Fatal(err)
			}
			event := KvEvent{Kind: KvStored, Worker: Worker{ID: w}, Tier: TierDevice, Hashes: hashes[:w+1]}
			if err := r.ApplyKvEvents([]KvEvent{event}); err != nil {
				t.Fatal(err)
			}
		}
		if err := overFleet.FleetAdd(Worker{ID: w}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(1); id <= 24; id++ {
		if id == 12 {
			rows[5].Flags |= RowOverloaded
			if err := overFleet.FleetSetOverloaded(Worker{ID: 5}, true); err != nil {
				t.Fatal(err)
			}
		}
		prompt := hashes[:id%6+1]
		a, err := overRows.Route(policy, selA, &req, prompt, rows, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := overFleet.RouteFleet(policy, selB, &req, prompt, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("route %d: over rows %+v, over the fleet %+v", id, a, b)
		}
		if id%4 == 0 {
			for _, r := range []*Router{overRows, overFleet} {
				if err := r.FreeRequest(id - 2); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	fleetRows, err := overFleet.FleetRows()
	if err != nil || fmt.Sprint(fleetRows) != fmt.Sprint(rows) {
		t.Fatalf("fleet rows %+v (%v), rows %+v", fleetRows, err, rows)
	}
	if _, err := overFleet.RouteFleetAt(policy, selB, &req, hashes, 99, math.NaN()); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("NaN time: %v", err)
	}
	if err := overFleet.FleetAdd(Worker{ID: 2}, 0); !errors.Is(err, StatusDuplicateWorker) {
		t.Errorf("duplicate: %v", err)
	}
	if err := overFleet.FleetSetTaints(Worker{ID: 9}, 1); !errors.Is(err, StatusUnknownWorker) {
		t.Errorf("unknown: %v", err)
	}
	if err := overFleet.FleetRemove(Worker{ID: 2}); err != nil {
		t.Error(err)
	}
	if err := overFleet.RemoveWorker(Worker{ID: 3}); err != nil {
		t.Error(err)
	}
	if fleetRows, _ := overFleet.FleetRows(); len(fleetRows) != 4 {
		t.Errorf("after removals, %d rows", len(fleetRows))
	}
	overFleet.Close()
	if err := overFleet.FleetAdd(Worker{ID: 1}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}
