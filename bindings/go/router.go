package libroute

/*
#include "libroute.h"
// Routes and, on failure, reads the detail message in the same C call (see lr_select).
static libroute_status lr_route(libroute_router *router, const libroute_policy *policy,
                                libroute_selector *selector, const libroute_request *request,
                                const uint64_t *hashes, size_t hashes_len, libroute_row *rows,
                                size_t rows_len, uint64_t id, uint64_t now, libroute_selection *out,
                                char *detail, size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_router_route(router, policy, selector, request, hashes, hashes_len,
                                             rows, rows_len, id, now, out);
  *detail_n = 0;
  if (rc != LIBROUTE_STATUS_OK) libroute_last_error(detail, detail_len, detail_n);
  return rc;
}
// The same with the time in milliseconds (libroute_router_route_at).
static libroute_status lr_route_at(libroute_router *router, const libroute_policy *policy,
                                   libroute_selector *selector, const libroute_request *request,
                                   const uint64_t *hashes, size_t hashes_len, libroute_row *rows,
                                   size_t rows_len, uint64_t id, double now_ms, libroute_selection *out,
                                   char *detail, size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_router_route_at(router, policy, selector, request, hashes, hashes_len,
                                                rows, rows_len, id, now_ms, out);
  *detail_n = 0;
  if (rc != LIBROUTE_STATUS_OK) libroute_last_error(detail, detail_len, detail_n);
  return rc;
}
// The same over the router's fleet (libroute_router_route_fleet and _route_fleet_at).
static libroute_status lr_route_fleet(libroute_router *router, const libroute_policy *policy,
                                      libroute_selector *selector, const libroute_request *request,
                                      const uint64_t *hashes, size_t hashes_len, uint64_t id,
                                      uint64_t now, libroute_selection *out, char *detail,
                                      size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_router_route_fleet(router, policy, selector, request, hashes,
                                                   hashes_len, id, now, out);
  *detail_n = 0;
  if (rc != LIBROUTE_STATUS_OK) libroute_last_error(detail, detail_len, detail_n);
  return rc;
}
static libroute_status lr_route_fleet_at(libroute_router *router, const libroute_policy *policy,
                                         libroute_selector *selector, const libroute_request *request,
                                         const uint64_t *hashes, size_t hashes_len, uint64_t id,
                                         double now_ms, libroute_selection *out, char *detail,
                                         size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_router_route_fleet_at(router, policy, selector, request, hashes,
                                                      hashes_len, id, now_ms, out);
  *detail_n = 0;
  if (rc != LIBROUTE_STATUS_OK) libroute_last_error(detail, detail_len, detail_n);
  return rc;
}
*/
import "C"

import (
	"errors"
	"runtime"
	"unsafe"
)

// RouterConfig sizes a Router. Every slot count is a power of two of at least 8; a table holds at
// most half its slots.
type RouterConfig struct {
	// BlockSlots sizes the prefix index (it holds BlockSlots/2 blocks, evicting the least
	// recently stored beyond that).
	BlockSlots int
	// MaxWorkers is 64, 256 or 1024.
	MaxWorkers int
	// RequestSlots sizes the load ledger (it books RequestSlots/2 requests).
	RequestSlots int
	// Tombstones absorb replica events that arrive before their booking (0 for none).
	Tombstones int
	// PredictionSlots turns on approximate mode (the router's own decisions stand in for KV
	// events) when not 0; predictions live PredictionTTL units of Route's now.
	PredictionSlots int
	PredictionTTL   uint64
	// HostWeight and DiskWeight credit host-memory and disk blocks in the accounting estimate.
	HostWeight, DiskWeight float64
}

// Router is the host side of routing: the prefix-overlap index fed by KV-cache events, the load
// ledger, and in approximate mode the router's own predictions. It is not safe for concurrent
// use; Close frees it (idempotent), and a finalizer is only a backstop.
type Router struct {
	ptr *C.libroute_router
}

// NewRouter allocates every table of a router; nothing allocates afterwards.
func NewRouter(config RouterConfig) (*Router, error) {
	for _, v := range []int{config.BlockSlots, config.MaxWorkers, config.RequestSlots, config.Tombstones, config.PredictionSlots} {
		if v < 0 {
			return nil, &Error{Status: StatusInvalidArgument, Detail: "a router size is negative"}
		}
	}
	c := C.libroute_router_config{
		block_slots:      C.size_t(config.BlockSlots),
		max_workers:      C.size_t(config.MaxWorkers),
		request_slots:    C.size_t(config.RequestSlots),
		tombstones:       C.size_t(config.Tombstones),
		prediction_slots: C.size_t(config.PredictionSlots),
		prediction_ttl:   C.uint64_t(config.PredictionTTL),
		host_weight:      C.double(config.HostWeight),
		disk_weight:      C.double(config.DiskWeight),
	}
	var ptr *C.libroute_router
	if err := call(func() C.libroute_status { return C.libroute_router_new(&c, &ptr) }); err != nil {
		return nil, err
	}
	r := &Router{ptr: ptr}
	runtime.SetFinalizer(r, (*Router).Close)
	return r, nil
}

// Close frees the router. It is idempotent; using the router afterwards returns ErrClosed.
func (r *Router) Close() {
	if r.ptr != nil {
		C.libroute_router_free(r.ptr)
		r.ptr = nil
		runtime.SetFinalizer(r, nil)
	}
}

func cWorker(w Worker) C.libroute_worker {
	return C.libroute_worker{worker_id: C.uint64_t(w.ID), dp_rank: C.uint32_t(w.DPRank)}
}

// do runs one router call, or returns ErrClosed.
func (r *Router) do(f func(*C.libroute_router) C.libroute_status) error {
	if r.ptr == nil {
		return ErrClosed
	}
	err := call(func() C.libroute_status { return f(r.ptr) })
	runtime.KeepAlive(r)
	return err
}

// AddWorker registers a worker with the ledger (the index learns workers from KV events).
func (r *Router) AddWorker(w Worker) error {
	return r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_add_worker(p, cWorker(w)) })
}

// RemoveWorker forgets a worker: its blocks leave the index, its load the ledger, and its row
// the fleet.
func (r *Router) RemoveWorker(w Worker) error {
	return r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_remove_worker(p, cWorker(w)) })
}

// FleetAdd adds a worker to the router's fleet, the candidates RouteFleet routes over, with
// taints (bit i for taint index i), not overloaded. Register it with AddWorker too, for it to be
// booked. StatusDuplicateWorker when it is in the fleet, StatusCapacityExceeded when MaxWorkers
// are.
func (r *Router) FleetAdd(w Worker, taints uint64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_fleet_add(p, cWorker(w), C.uint64_t(taints))
	})
}

// FleetRemove takes a worker out of the fleet (its blocks and load stay); StatusUnknownWorker
// when it is not in it.
func (r *Router) FleetRemove(w Worker) error {
	return r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_fleet_remove(p, cWorker(w)) })
}

// FleetSetTaints replaces the taints of a worker's row in the fleet.
func (r *Router) FleetSetTaints(w Worker, taints uint64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_fleet_set_taints(p, cWorker(w), C.uint64_t(taints))
	})
}

// FleetSetOverloaded marks a worker's row in the fleet overloaded (skipped with the overload
// reason) or not.
func (r *Router) FleetSetOverloaded(w Worker, overloaded bool) error {
	var flag C.uint8_t
	if overloaded {
		flag = 1
	}
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_fleet_set_overloaded(p, cWorker(w), flag)
	})
}

// FleetRows returns a copy of the fleet's rows, sorted by worker, with the inputs the last
// RouteFleet read: a Selection's Row from RouteFleet is a position in them.
func (r *Router) FleetRows() ([]Row, error) {
	var n C.size_t
	err := r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_fleet_rows(p, nil, 0, &n) })
	if err != nil && !errors.Is(err, StatusBufferTooSmall) {
		return nil, err
	}
	rows := make([]Row, int(n))
	if len(rows) == 0 {
		return rows, nil
	}
	err = r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_fleet_rows(p, (*C.libroute_row)(unsafe.Pointer(&rows[0])), n, &n)
	})
	if err != nil {
		return nil, err
	}
	return rows[:int(n)], nil
}

// KvKind is the kind of a KV-cache event.
type KvKind uint32

// The KV event kinds.
const (
	KvStored        KvKind = C.LIBROUTE_KV_KIND_STORED
	KvRemoved       KvKind = C.LIBROUTE_KV_KIND_REMOVED
	KvCleared       KvKind = C.LIBROUTE_KV_KIND_CLEARED
	KvWorkerRemoved KvKind = C.LIBROUTE_KV_KIND_WORKER_REMOVED
)

// Tier is a cache tier.
type Tier uint32

// The tiers.
const (
	TierDevice Tier = 0
	TierHost   Tier = 1
	TierDisk   Tier = 2
)

// KvEvent is one KV-cache event from a worker: Hashes are chained block hashes.
type KvEvent struct {
	Kind   KvKind
	Worker Worker
	Tier   Tier
	Hashes []uint64
}

// ApplyKvEvents applies events in order; if one is invalid (kind, tier), none is applied.
func (r *Router) ApplyKvEvents(events []KvEvent) error {
	if len(events) == 0 {
		return r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_apply_kv_events(p, nil, 0) })
	}
	var pinner runtime.Pinner
	defer pinner.Unpin()
	c := make([]C.libroute_kv_event, len(events))
	for i, e := range events {
		c[i] = C.libroute_kv_event{kind: C.uint32_t(e.Kind), worker: cWorker(e.Worker), tier: C.uint32_t(e.Tier)}
		if len(e.Hashes) > 0 {
			// Go memory pointed to from Go memory passed to C must be pinned.
			pinner.Pin(&e.Hashes[0])
			c[i].hashes = (*C.uint64_t)(unsafe.Pointer(&e.Hashes[0]))
			c[i].hashes_len = C.size_t(len(e.Hashes))
		}
	}
	err := r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_apply_kv_events(p, &c[0], C.size_t(len(c)))
	})
	runtime.KeepAlive(events)
	return err
}

// KvBatchSummary is what one engine KV batch did (Router.ApplyKvBatch).
type KvBatchSummary struct {
	// Worker the events were applied to: the one given, with the batch's data-parallel rank.
	Worker Worker
	// Events in the batch.
	Events int
	// StoredBlocks and RemovedBlocks went into and out of the index.
	StoredBlocks, RemovedBlocks int
	// OrphanedBlocks were stored after a parent block never seen, and skipped.
	OrphanedBlocks int
	// UnknownRemovals are removed blocks never stored, ignored.
	UnknownRemovals int
	// Clears counts AllBlocksCleared events.
	Clears int
}

// ReadKvBatches turns on ApplyKvBatch: engines' stored blocks have blockSize tokens (the size
// requests are hashed with, BlockHashes), and the map from engine block hashes to the router's
// holds engineHashSlots/2 blocks (a power of two of at least 8; size it like BlockSlots).
func (r *Router) ReadKvBatches(blockSize uint32, engineHashSlots int) error {
	if engineHashSlots < 0 {
		return &Error{Status: StatusInvalidArgument, Detail: "engineHashSlots is negative"}
	}
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_read_kv_batches(p, C.uint32_t(blockSize), C.size_t(engineHashSlots))
	})
}

// Snapshot returns the router's state, its index and ledger (not approximate mode's
// predictions), in libroute's versioned snapshot format: a router of the same MaxWorkers given
// it with Restore holds the same state, so a restarted host resumes where the snapshot was
// taken. A router that reads engines' KV batches (ReadKvBatches) has none: their map from engine
// to router block hashes is not in a snapshot (StatusInvalidArgument).
func (r *Router) Snapshot() ([]byte, error) {
	var size C.size_t
	err := r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_snapshot(p, nil, 0, &size)
	})
	if !errors.Is(err, StatusBufferTooSmall) {
		return nil, err
	}
	buf := make([]byte, int(size))
	var written C.size_t
	err = r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_snapshot(p, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &written)
	})
	runtime.KeepAlive(buf)
	if err != nil {
		return nil, err
	}
	return buf[:int(written)], nil
}

// Restore replaces the router's index and ledger with those of a Snapshot (of a router with the
// same MaxWorkers), in tables of this router's sizes; approximate mode's predictions are
// forgotten, and workers added since the snapshot must be added again. A truncated or damaged
// snapshot, or one holding more than this router's tables do, is StatusInvalidArgument with a
// detail naming the byte offset, and changes nothing.
func (r *Router) Restore(snapshot []byte) error {
	var ptr *C.uint8_t
	if len(snapshot) > 0 {
		ptr = (*C.uint8_t)(unsafe.Pointer(&snapshot[0]))
	}
	err := r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_restore(p, ptr, C.size_t(len(snapshot)))
	})
	runtime.KeepAlive(snapshot)
	return err
}

// ApplyKvBatch applies one raw KV-event payload, as vLLM and SGLang publish it (the msgpack frame
// of their ZMQ messages), as w's events. A malformed, truncated or unknown payload is
// StatusInvalidArgument with a detail naming the byte offset, and changes nothing.
func (r *Router) ApplyKvBatch(w Worker, payload []byte) (KvBatchSummary, error) {
	var s C.libroute_kv_batch_summary
	var ptr *C.uint8_t
	if len(payload) > 0 {
		ptr = (*C.uint8_t)(unsafe.Pointer(&payload[0]))
	}
	err := r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_apply_kv_batch(p, cWorker(w), ptr, C.size_t(len(payload)), &s)
	})
	runtime.KeepAlive(payload)
	if err != nil {
		return KvBatchSummary{}, err
	}
	return KvBatchSummary{
		Worker:          Worker{ID: uint64(s.worker.worker_id), DPRank: uint32(s.worker.dp_rank)},
		Events:          int(s.events),
		StoredBlocks:    int(s.stored_blocks),
		RemovedBlocks:   int(s.removed_blocks),
		OrphanedBlocks:  int(s.orphaned_blocks),
		UnknownRemovals: int(s.unknown_removals),
		Clears:          int(s.clears),
	}, nil
}

// BlockHashes returns the chained block hashes of tokens (one per complete block of blockSize
// tokens), as NVIDIA Dynamo's router computes them, salted by the LoRA adapter's name ("" for
// the base model): the hashes to route with when engines' KV batches feed the router.
func BlockHashes(tokens []uint32, blockSize uint32, loraName string) ([]uint64, error) {
	// A block size of 0 is refused by the library itself, with its own sentence.
	n := 0
	if blockSize > 0 {
		n = len(tokens) / int(blockSize)
	}
	out := make([]uint64, n)
	var tok *C.uint32_t
	if len(tokens) > 0 {
		tok = (*C.uint32_t)(unsafe.Pointer(&tokens[0]))
	}
	var lora *C.uint8_t
	if len(loraName) > 0 {
		lora = (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(loraName)))
	}
	var outPtr *C.uint64_t
	if len(out) > 0 {
		outPtr = (*C.uint64_t)(unsafe.Pointer(&out[0]))
	}
	var written C.size_t
	err := call(func() C.libroute_status {
		return C.libroute_block_hashes(tok, C.size_t(len(tokens)), C.uint32_t(blockSize), lora,
			C.size_t(len(loraName)), outPtr, C.size_t(len(out)), &written)
	})
	runtime.KeepAlive(tokens)
	runtime.KeepAlive(loraName)
	if err != nil {
		return nil, err
	}
	return out[:written], nil
}

// LedgerKind is the kind of a replica's booking event.
type LedgerKind uint32

// The ledger event kinds.
const (
	LedgerBooked          LedgerKind = C.LIBROUTE_LEDGER_KIND_BOOKED
	LedgerPrefillComplete LedgerKind = C.LIBROUTE_LEDGER_KIND_PREFILL_COMPLETE
	LedgerFreed           LedgerKind = C.LIBROUTE_LEDGER_KIND_FREED
)

// LedgerEvent is a booking event relayed from another router replica (Worker, PrefillTokens and
// Blocks for LedgerBooked only).
type LedgerEvent struct {
	Kind          LedgerKind
	ID            uint64
	Worker        Worker
	PrefillTokens uint64
	Blocks        uint64
}

// ApplyLedgerEvents applies replica events idempotently: repeated, late and reordered events are
// absorbed and counted.
func (r *Router) ApplyLedgerEvents(events []LedgerEvent) error {
	c := make([]C.libroute_ledger_event, len(events))
	for i, e := range events {
		c[i] = C.libroute_ledger_event{kind: C.uint32_t(e.Kind), id: C.uint64_t(e.ID), worker: cWorker(e.Worker),
			prefill_tokens: C.uint64_t(e.PrefillTokens), blocks: C.uint64_t(e.Blocks)}
	}
	return r.do(func(p *C.libroute_router) C.libroute_status {
		if len(c) == 0 {
			return C.libroute_router_apply_ledger_events(p, nil, 0)
		}
		return C.libroute_router_apply_ledger_events(p, &c[0], C.size_t(len(c)))
	})
}

// Book books request id on a worker, for hosts that select with a Selector themselves.
func (r *Router) Book(id uint64, w Worker, prefillTokens, blocks uint64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_book(p, C.uint64_t(id), cWorker(w), C.uint64_t(prefillTokens), C.uint64_t(blocks))
	})
}

// BookAt is Book at nowMs (milliseconds on the host's clock, the one it passes to
// PrefillCompleteAt): when the request's prefill completes, the time it took calibrates the
// worker's speed, which the ttft policy reads.
func (r *Router) BookAt(id uint64, w Worker, prefillTokens, blocks uint64, nowMs float64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_book_at(p, C.uint64_t(id), cWorker(w), C.uint64_t(prefillTokens), C.uint64_t(blocks), C.double(nowMs))
	})
}

// PrefillCompleteAt is PrefillComplete at nowMs: a request booked at a time (BookAt, RouteAt)
// teaches its worker's speed how long its first token took.
func (r *Router) PrefillCompleteAt(id uint64, nowMs float64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_prefill_complete_at(p, C.uint64_t(id), C.double(nowMs))
	})
}

// PrefillComplete marks request id's prefill complete.
func (r *Router) PrefillComplete(id uint64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status {
		return C.libroute_router_prefill_complete(p, C.uint64_t(id))
	})
}

// FreeRequest frees request id (finished or cancelled).
func (r *Router) FreeRequest(id uint64) error {
	return r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_free_request(p, C.uint64_t(id)) })
}

// Route does it all for one request: fills rows (in place) with the index's overlaps for hashes
// and the ledger's loads, selects with policy, and books request id on the chosen worker. Nothing
// is booked on an error. The Selection's Contributions are not filled (use s.LastCosts).
func (r *Router) Route(policy *Policy, s *Selector, req *Request, hashes []uint64, rows []Row, id, now uint64) (Selection, error) {
	return r.route(policy, s, req, hashes, rows, id, func(c routeArgs) C.libroute_status {
		return C.lr_route(c.router, c.policy, c.selector, c.request, c.hashes, c.hashesLen, c.rows, c.rowsLen,
			C.uint64_t(id), C.uint64_t(now), &s.out, &s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	})
}

// RouteAt is Route at nowMs (milliseconds on the host's clock, the one it passes to
// PrefillCompleteAt): the booking is timed, so its prefill completion calibrates the chosen
// worker's speed, and the rows get that speed (RowHasSpeed) when the policy reads it (the ttft
// policy). A router with PredictionSlots records the choice as predicted blocks expiring
// PredictionTTL whole milliseconds later: approximate mode, or beside KV events the blocks of
// requests routed and not yet computed, which the ttft policy credits.
func (r *Router) RouteAt(policy *Policy, s *Selector, req *Request, hashes []uint64, rows []Row, id uint64, nowMs float64) (Selection, error) {
	return r.route(policy, s, req, hashes, rows, id, func(c routeArgs) C.libroute_status {
		return C.lr_route_at(c.router, c.policy, c.selector, c.request, c.hashes, c.hashesLen, c.rows, c.rowsLen,
			C.uint64_t(id), C.double(nowMs), &s.out, &s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	})
}

// RouteFleet is Route over the router's fleet (FleetAdd) instead of rows passed each call: each
// worker is looked for where it was found last time, and only the rows of workers whose load or
// index bit changed since the last RouteFleet are read again. The selection's Row is a position
// in FleetRows. StatusNoEndpoints when the fleet is empty.
func (r *Router) RouteFleet(policy *Policy, s *Selector, req *Request, hashes []uint64, id, now uint64) (Selection, error) {
	return r.route(policy, s, req, hashes, nil, id, func(c routeArgs) C.libroute_status {
		return C.lr_route_fleet(c.router, c.policy, c.selector, c.request, c.hashes, c.hashesLen,
			C.uint64_t(id), C.uint64_t(now), &s.out, &s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	})
}

// RouteFleetAt is RouteFleet at nowMs, as RouteAt is Route at nowMs.
func (r *Router) RouteFleetAt(policy *Policy, s *Selector, req *Request, hashes []uint64, id uint64, nowMs float64) (Selection, error) {
	return r.route(policy, s, req, hashes, nil, id, func(c routeArgs) C.libroute_status {
		return C.lr_route_fleet_at(c.router, c.policy, c.selector, c.request, c.hashes, c.hashesLen,
			C.uint64_t(id), C.double(nowMs), &s.out, &s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	})
}

// routeArgs are the C arguments Route, RouteAt, RouteFleet and RouteFleetAt share (no rows for
// the fleet's).
type routeArgs struct {
	router    *C.libroute_router
	policy    *C.libroute_policy
	selector  *C.libroute_selector
	request   *C.libroute_request
	hashes    *C.uint64_t
	hashesLen C.size_t
	rows      *C.libroute_row
	rowsLen   C.size_t
}

func (r *Router) route(policy *Policy, s *Selector, req *Request, hashes []uint64, rows []Row, id uint64, call func(routeArgs) C.libroute_status) (Selection, error) {
	if r.ptr == nil || s.ptr == nil || policy == nil || policy.ptr == nil {
		return Selection{}, ErrClosed
	}
	var pinner runtime.Pinner
	defer pinner.Unpin()
	c := s.cRequest(req, &pinner)
	var rowsPtr *C.libroute_row
	if len(rows) > 0 {
		rowsPtr = (*C.libroute_row)(unsafe.Pointer(&rows[0]))
	}
	var hashesPtr *C.uint64_t
	if len(hashes) > 0 {
		hashesPtr = (*C.uint64_t)(unsafe.Pointer(&hashes[0]))
	}
	rc := call(routeArgs{r.ptr, policy.ptr, s.ptr, c, hashesPtr, C.size_t(len(hashes)), rowsPtr, C.size_t(len(rows))})
	runtime.KeepAlive(rows)
	runtime.KeepAlive(hashes)
	runtime.KeepAlive(req)
	runtime.KeepAlive(policy)
	runtime.KeepAlive(s)
	runtime.KeepAlive(r)
	if rc != C.LIBROUTE_STATUS_OK {
		return Selection{}, &Error{Status: Status(rc), Detail: C.GoStringN(&s.detail[0], C.int(s.detailLen))}
	}
	return s.selection(false), nil
}

// RouterCounters is what a router has done, for hosts to export.
type RouterCounters struct {
	Blocks, IndexWorkers                         int
	Evictions, RejectedKvEvents, IgnoredKvEvents uint64
	ActiveRequests, LedgerWorkers                int
	DuplicateLedgerEvents, LateLedgerEvents      uint64
	UnknownWorkerLedgerEvents                    uint64
	Predictions                                  int
	ForcedPredictionExpiries                     uint64
}

// Counters reads the router's counters.
func (r *Router) Counters() (RouterCounters, error) {
	var c C.libroute_router_counters
	if err := r.do(func(p *C.libroute_router) C.libroute_status { return C.libroute_router_get_counters(p, &c) }); err != nil {
		return RouterCounters{}, err
	}
	return RouterCounters{
		Blocks: int(c.blocks), IndexWorkers: int(c.index_workers), Evictions: uint64(c.evictions),
		RejectedKvEvents: uint64(c.rejected_kv_events), IgnoredKvEvents: uint64(c.ignored_kv_events),
		ActiveRequests: int(c.active_requests), LedgerWorkers: int(c.ledger_workers),
		DuplicateLedgerEvents: uint64(c.duplicate_ledger_events), LateLedgerEvents: uint64(c.late_ledger_events),
		UnknownWorkerLedgerEvents: uint64(c.unknown_worker_ledger_events), Predictions: int(c.predictions),
		ForcedPredictionExpiries: uint64(c.forced_prediction_expiries),
	}, nil
}
