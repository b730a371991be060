// Package libroute picks the GPU worker that serves each LLM inference request, through
// libroute's C ABI: KV-cache-aware, load-aware, allocation-free, and bit-for-bit the same
// decisions as the Rust core.
//
// Build: cgo finds libroute with pkg-config. Install it with `cargo xtask dist --prefix DIR` from
// the repository root, then set PKG_CONFIG_PATH=DIR/lib/pkgconfig (and LD_LIBRARY_PATH=DIR/lib at
// run time, for libroute.so).
//
// Lifetimes follow wasmtime-go: every handle has an idempotent Close; a finalizer frees what a
// caller forgets, as a backstop only. A Policy is immutable and may be shared by goroutines; a
// Selector is not: use one per goroutine.
package libroute

/*
#cgo pkg-config: libroute
#include <stdlib.h>
#include "libroute.h"

// Selects and, on failure, reads the detail message in the same C call: the detail is
// thread-local, and a goroutine may change threads between two cgo calls.
static libroute_status lr_select(const libroute_policy *policy, libroute_selector *selector,
                                 const libroute_request *request, const libroute_row *rows, size_t rows_len,
                                 libroute_selection *out, double *parts, size_t parts_len,
                                 char *detail, size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_select(policy, selector, request, rows, rows_len, out, parts, parts_len);
  *detail_n = 0;
  if (rc != LIBROUTE_STATUS_OK) libroute_last_error(detail, detail_len, detail_n);
  return rc;
}

*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Status is a libroute status code. Every error this package returns wraps one, so callers can
// test for a kind with errors.Is(err, libroute.StatusAllOverloaded).
type Status uint32

// The status codes of libroute.h (values are stable and never reused).
const (
	StatusOK               Status = C.LIBROUTE_STATUS_OK
	StatusNullArgument     Status = C.LIBROUTE_STATUS_NULL_ARGUMENT
	StatusInvalidArgument  Status = C.LIBROUTE_STATUS_INVALID_ARGUMENT
	StatusBufferTooSmall   Status = C.LIBROUTE_STATUS_BUFFER_TOO_SMALL
	StatusCapacityExceeded Status = C.LIBROUTE_STATUS_CAPACITY_EXCEEDED
	StatusInvalidJSON      Status = C.LIBROUTE_STATUS_INVALID_JSON
	StatusUnknownKey       Status = C.LIBROUTE_STATUS_UNKNOWN_KEY
	StatusInvalidKnob      Status = C.LIBROUTE_STATUS_INVALID_KNOB
	StatusNoEndpoints      Status = C.LIBROUTE_STATUS_NO_ENDPOINTS
	StatusAllFiltered      Status = C.LIBROUTE_STATUS_ALL_FILTERED
	StatusAllOverloaded    Status = C.LIBROUTE_STATUS_ALL_OVERLOADED
	StatusInvalidRequest   Status = C.LIBROUTE_STATUS_INVALID_REQUEST
	StatusInvalidRow       Status = C.LIBROUTE_STATUS_INVALID_ROW
	StatusDuplicateWorker  Status = C.LIBROUTE_STATUS_DUPLICATE_WORKER
	StatusPinNotAllowed    Status = C.LIBROUTE_STATUS_PIN_NOT_ALLOWED
	StatusPinOverloaded    Status = C.LIBROUTE_STATUS_PIN_OVERLOADED
	StatusPinIneligible    Status = C.LIBROUTE_STATUS_PIN_INELIGIBLE
	StatusNonFiniteCost    Status = C.LIBROUTE_STATUS_NON_FINITE_COST
	StatusNonFiniteTotal   Status = C.LIBROUTE_STATUS_NON_FINITE_TOTAL
	StatusPanic            Status = C.LIBROUTE_STATUS_PANIC
	StatusDuplicateRequest Status = C.LIBROUTE_STATUS_DUPLICATE_REQUEST
	StatusUnknownRequest   Status = C.LIBROUTE_STATUS_UNKNOWN_REQUEST
	StatusUnknownWorker    Status = C.LIBROUTE_STATUS_UNKNOWN_WORKER
	statusClosed           Status = 1<<32 - 1
)

// Error returns the status's fixed message.
func (s Status) Error() string {
	if s == statusClosed {
		return "libroute: use of a closed handle"
	}
	var buf [256]C.char
	var n C.size_t
	if C.libroute_status_message(C.uint32_t(s), &buf[0], C.size_t(len(buf)), &n) != C.LIBROUTE_STATUS_OK {
		return fmt.Sprintf("libroute status %d", uint32(s))
	}
	return "libroute: " + C.GoStringN(&buf[0], C.int(n))
}

// Error is a failed call: its status and the detail libroute gave (which knob, row or scorer).
type Error struct {
	Status Status
	Detail string
}

// Error is the detail, one sentence that already says what the status says and names what was
// wrong (the same text C's libroute_last_error gives); the status's fixed text when there is none.
func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Status.Error()
	}
	return "libroute: " + e.Detail
}

// Unwrap lets errors.Is match the status.
func (e *Error) Unwrap() error { return e.Status }

// ErrClosed is returned by methods of a handle after Close.
var ErrClosed error = statusClosed

// check turns a status into an error with the calling thread's detail. It must run on the thread
// that made the call: callers keep the goroutine locked to its thread across both.
func check(rc C.libroute_status) error {
	if rc == C.LIBROUTE_STATUS_OK {
		return nil
	}
	var buf [512]C.char
	var n C.size_t
	detail := ""
	if C.libroute_last_error(&buf[0], C.size_t(len(buf)), &n) == C.LIBROUTE_STATUS_OK {
		detail = C.GoStringN(&buf[0], C.int(n))
	}
	return &Error{Status: Status(rc), Detail: detail}
}

// call runs f on one OS thread, so the detail message read by check is the one f left.
func call(f func() C.libroute_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(f())
}

// Version is the linked library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.libroute_version()) }

// HeaderVersion is the version of the header this package was compiled against.
const HeaderVersion = C.LIBROUTE_VERSION

func init() {
	// The same contract version at build and at run time, or nothing works.
	if v := Version(); v != HeaderVersion {
		panic("libroute: compiled against libroute.h " + HeaderVersion + " but linked libroute " + v)
	}
}

// Policy is an immutable routing policy (the default cost and picker, configured by JSON).
// It may be used by many goroutines at once.
type Policy struct {
	ptr *C.libroute_policy
	// lent: owned by a PolicySet, which frees it; Close only forgets it.
	lent bool
}

// NewPolicy builds a policy from JSON configuration: the default policy's knobs
// (overlap_score_credit, temperature, seed, ...), or a catalog policy by type
// ({"type": "least_loaded", ...}). An empty string means the default policy's defaults.
func NewPolicy(config string) (*Policy, error) {
	var ptr *C.libroute_policy
	text := C.CString(config)
	defer C.free(unsafe.Pointer(text))
	if err := call(func() C.libroute_status {
		return C.libroute_policy_new(text, C.size_t(len(config)), &ptr)
	}); err != nil {
		return nil, err
	}
	p := &Policy{ptr: ptr}
	runtime.SetFinalizer(p, (*Policy).Close)
	return p, nil
}

// Close frees the policy. It is idempotent; using the policy afterwards returns ErrClosed.
func (p *Policy) Close() {
	if p.ptr != nil {
		if !p.lent {
			C.libroute_policy_free(p.ptr)
		}
		p.ptr = nil
		runtime.SetFinalizer(p, nil)
	}
}

// Inputs says which input groups the policy reads for a request of role: without InputCache a
// host need not compute cache overlaps for it.
func (p *Policy) Inputs(role Role, conditionalDisagg bool) (Inputs, error) {
	if p.ptr == nil {
		return 0, ErrClosed
	}
	var out C.uint8_t
	err := call(func() C.libroute_status {
		return C.libroute_policy_inputs(p.ptr, C.uint32_t(role), boolByte(conditionalDisagg), &out)
	})
	runtime.KeepAlive(p)
	return Inputs(out), err
}

// Inputs is a set of input groups.
type Inputs uint8

// The input groups.
const (
	InputCache          Inputs = C.LIBROUTE_INPUT_CACHE
	InputLoad           Inputs = C.LIBROUTE_INPUT_LOAD
	InputPreferredTaint Inputs = C.LIBROUTE_INPUT_PREFERRED_TAINT
)

// Role is the role of the pool a selection is for.
type Role uint32

// The roles.
const (
	RolePrefill    Role = C.LIBROUTE_ROLE_PREFILL
	RoleDecode     Role = C.LIBROUTE_ROLE_DECODE
	RoleAggregated Role = C.LIBROUTE_ROLE_AGGREGATED
	RoleEncode     Role = C.LIBROUTE_ROLE_ENCODE
)

// Worker is a worker and its data-parallel rank.
type Worker struct {
	ID     uint64
	DPRank uint32
}

// Row flags.
const (
	RowHasCache   uint32 = C.LIBROUTE_ROW_HAS_CACHE
	RowHasLoad    uint32 = C.LIBROUTE_ROW_HAS_LOAD
	RowOverloaded uint32 = C.LIBROUTE_ROW_OVERLOADED
	RowHasSpeed   uint32 = C.LIBROUTE_ROW_HAS_SPEED
)

// Row is one candidate worker, laid out exactly as libroute_row (a test checks every field), so a
// []Row is passed to libroute without copying.
type Row struct {
	Worker              Worker
	Taints              uint64
	Flags               uint32
	DeviceBlocks        uint32
	HostBlocks          uint32
	DiskBlocks          uint32
	EffectiveBlocks     float64
	EffectiveTokens     uint64
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  uint64
	ActiveRequests      uint64
	// With RowHasSpeed: the worker's measured first-token time, read by the ttft policy.
	BaseMs             float64
	MsPerPrefillToken  float64
	MsPerActiveRequest float64
}

// PreferredTaint biases the choice toward (positive weight) or away from workers with a taint.
type PreferredTaint struct {
	Taint  uint32
	Weight float64
}

// BlockRange is a half-open range of block positions found in a shared cache.
type BlockRange struct{ Start, End uint64 }

// Request is one request to route.
type Request struct {
	PromptTokens       uint64
	BlockSize          uint32
	Role               Role
	TrackPrefillTokens bool
	ConditionalDisagg  bool
	HasTierMatches     bool
	Pin                *Worker
	RequiredTaints     uint64
	PreferredTaints    []PreferredTaint
	// SharedHits, when not nil, are sorted, disjoint block ranges found in a shared cache.
	SharedHits []BlockRange
	// Session, when not nil, is the conversation the request belongs to (session affinity).
	Session *uint64
}

// Reason says why a row was chosen.
type Reason uint32

// The reasons.
const (
	ReasonPinned  Reason = C.LIBROUTE_REASON_PINNED
	ReasonMinCost Reason = C.LIBROUTE_REASON_MIN_COST
	ReasonSampled Reason = C.LIBROUTE_REASON_SAMPLED
	ReasonCustom  Reason = C.LIBROUTE_REASON_CUSTOM
)

// Selection is the outcome of one selection.
type Selection struct {
	Row           int
	Worker        Worker
	Cost          float64
	Candidates    int
	Reason        Reason
	Ties          uint32
	Probability   float64
	RequestBlocks uint64
	CachedTokens  uint64
	// Contributions holds each scorer's share of Cost (the default cost first), in its first
	// Scorers entries.
	Contributions [8]float64
	// Scorers is how many scorers contributed.
	Scorers int
}

// Selector holds one goroutine's selection buffers and random stream. It is not safe for
// concurrent use.
type Selector struct {
	ptr      *C.libroute_selector
	capacity int
	// Per-call scratch, kept here so a selection allocates nothing.
	req       C.libroute_request
	out       C.libroute_selection
	parts     [8]C.double
	detail    [512]C.char
	detailLen C.size_t
}

// NewSelector makes a selector for up to capacity rows (1 to 4096); its unseeded stream starts
// from entropy.
func NewSelector(capacity int, entropy uint64) (*Selector, error) {
	if capacity < 0 {
		return nil, &Error{Status: StatusInvalidArgument, Detail: "capacity is negative"}
	}
	var ptr *C.libroute_selector
	if err := call(func() C.libroute_status {
		return C.libroute_selector_new(C.size_t(capacity), C.uint64_t(entropy), &ptr)
	}); err != nil {
		return nil, err
	}
	s := &Selector{ptr: ptr, capacity: capacity}
	runtime.SetFinalizer(s, (*Selector).Close)
	return s, nil
}

// Close frees the selector. It is idempotent; using it afterwards returns ErrClosed.
func (s *Selector) Close() {
	if s.ptr != nil {
		C.libroute_selector_free(s.ptr)
		s.ptr = nil
		runtime.SetFinalizer(s, nil)
	}
}

func boolByte(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

// Select picks one of rows for req under policy. rows is read in place (not copied), and a
// selection allocates nothing.
func (s *Selector) Select(policy *Policy, req *Request, rows []Row) (Selection, error) {
	if s.ptr == nil || policy == nil || policy.ptr == nil {
		return Selection{}, ErrClosed
	}
	var pinner runtime.Pinner
	defer pinner.Unpin()
	c := s.cRequest(req, &pinner)
	var rowsPtr *C.libroute_row
	if len(rows) > 0 {
		rowsPtr = (*C.libroute_row)(unsafe.Pointer(&rows[0]))
	}
	rc := C.lr_select(policy.ptr, s.ptr, c, rowsPtr, C.size_t(len(rows)), &s.out, &s.parts[0], C.size_t(len(s.parts)),
		&s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	runtime.KeepAlive(rows)
	runtime.KeepAlive(req)
	runtime.KeepAlive(policy)
	runtime.KeepAlive(s)
	if rc != C.LIBROUTE_STATUS_OK {
		return Selection{}, &Error{Status: Status(rc), Detail: C.GoStringN(&s.detail[0], C.int(s.detailLen))}
	}
	return s.selection(true), nil
}

// cRequest fills the selector's scratch C request from req, pinning the Go memory it points to.
func (s *Selector) cRequest(req *Request, pinner *runtime.Pinner) *C.libroute_request {
	c := &s.req
	*c = C.libroute_request{}
	c.prompt_tokens = C.uint64_t(req.PromptTokens)
	c.block_size = C.uint32_t(req.BlockSize)
	c.role = C.uint32_t(req.Role)
	c.track_prefill_tokens = boolByte(req.TrackPrefillTokens)
	c.conditional_disagg = boolByte(req.ConditionalDisagg)
	c.has_tier_matches = boolByte(req.HasTierMatches)
	c.required_taints = C.uint64_t(req.RequiredTaints)
	if req.Session != nil {
		c.has_session = 1
		c.session = C.uint64_t(*req.Session)
	}
	if req.Pin != nil {
		c.has_pin = 1
		c.pin = C.libroute_worker{worker_id: C.uint64_t(req.Pin.ID), dp_rank: C.uint32_t(req.Pin.DPRank)}
	}
	// The request struct is Go memory holding pointers to Go memory: cgo allows that only when
	// the memory pointed to is pinned. PreferredTaint and BlockRange have the C layouts (tested).
	if len(req.PreferredTaints) > 0 {
		pinner.Pin(&req.PreferredTaints[0])
		c.preferred_taints = (*C.libroute_preferred_taint)(unsafe.Pointer(&req.PreferredTaints[0]))
		c.preferred_taints_len = C.size_t(len(req.PreferredTaints))
	}
	if req.SharedHits != nil {
		c.has_shared_hits = 1
		if len(req.SharedHits) > 0 {
			pinner.Pin(&req.SharedHits[0])
			c.shared_hits = (*C.libroute_block_range)(unsafe.Pointer(&req.SharedHits[0]))
			c.shared_hits_len = C.size_t(len(req.SharedHits))
		}
	}
	return c
}

// selection converts the selector's scratch C selection (with the contributions if parts).
func (s *Selector) selection(parts bool) Selection {
	out := &s.out
	sel := Selection{
		Row:           int(out.row),
		Worker:        Worker{ID: uint64(out.worker.worker_id), DPRank: uint32(out.worker.dp_rank)},
		Cost:          float64(out.cost),
		Candidates:    int(out.candidates),
		Reason:        Reason(out.reason),
		Ties:          uint32(out.ties),
		Probability:   float64(out.probability),
		RequestBlocks: uint64(out.request_blocks),
		CachedTokens:  uint64(out.cached_tokens),
		Scorers:       int(out.scorers),
	}
	if !parts {
		sel.Scorers = 0
	}
	for i := 0; i < sel.Scorers && i < len(sel.Contributions); i++ {
		sel.Contributions[i] = float64(s.parts[i])
	}
	return sel
}

// Candidate is one candidate of the last selection: its row index and total cost.
type Candidate struct {
	Row  int
	Cost float64
}

// LastCosts returns every candidate of the selector's last successful selection, in the order the
// picker saw them; none after a failed selection.
func (s *Selector) LastCosts() ([]Candidate, error) {
	if s.ptr == nil {
		return nil, ErrClosed
	}
	rows := make([]C.size_t, s.capacity)
	costs := make([]C.double, s.capacity)
	var n C.size_t
	err := call(func() C.libroute_status {
		return C.libroute_selector_last_costs(s.ptr, &rows[0], &costs[0], C.size_t(len(rows)), &n)
	})
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	out := make([]Candidate, int(n))
	for i := range out {
		out[i] = Candidate{Row: int(rows[i]), Cost: float64(costs[i])}
	}
	return out, nil
}

// layoutMismatches lists every field whose offset or size differs between Row and libroute_row
// (and Worker and libroute_worker); the tests require it to be empty. It lives outside the test
// files because cgo is not available in them.
func layoutMismatches() []string {
	var g Row
	var c C.libroute_row
	var bad []string
	check := func(name string, goOff, cOff, goSize, cSize uintptr) {
		if goOff != cOff || goSize != cSize {
			bad = append(bad, fmt.Sprintf("%s: Go offset %d size %d, C offset %d size %d", name, goOff, goSize, cOff, cSize))
		}
	}
	check("Row", 0, 0, unsafe.Sizeof(g), unsafe.Sizeof(c))
	check("Worker.ID", unsafe.Offsetof(g.Worker.ID), unsafe.Offsetof(c.worker.worker_id), unsafe.Sizeof(g.Worker.ID), unsafe.Sizeof(c.worker.worker_id))
	check("Worker.DPRank", unsafe.Offsetof(g.Worker.DPRank), unsafe.Offsetof(c.worker.dp_rank), unsafe.Sizeof(g.Worker.DPRank), unsafe.Sizeof(c.worker.dp_rank))
	check("Worker", unsafe.Offsetof(g.Worker), unsafe.Offsetof(c.worker), unsafe.Sizeof(g.Worker), unsafe.Sizeof(c.worker))
	check("Taints", unsafe.Offsetof(g.Taints), unsafe.Offsetof(c.taints), unsafe.Sizeof(g.Taints), unsafe.Sizeof(c.taints))
	check("Flags", unsafe.Offsetof(g.Flags), unsafe.Offsetof(c.flags), unsafe.Sizeof(g.Flags), unsafe.Sizeof(c.flags))
	check("DeviceBlocks", unsafe.Offsetof(g.DeviceBlocks), unsafe.Offsetof(c.device_blocks), unsafe.Sizeof(g.DeviceBlocks), unsafe.Sizeof(c.device_blocks))
	check("HostBlocks", unsafe.Offsetof(g.HostBlocks), unsafe.Offsetof(c.host_blocks), unsafe.Sizeof(g.HostBlocks), unsafe.Sizeof(c.host_blocks))
	check("DiskBlocks", unsafe.Offsetof(g.DiskBlocks), unsafe.Offsetof(c.disk_blocks), unsafe.Sizeof(g.DiskBlocks), unsafe.Sizeof(c.disk_blocks))
	check("EffectiveBlocks", unsafe.Offsetof(g.EffectiveBlocks), unsafe.Offsetof(c.effective_blocks), unsafe.Sizeof(g.EffectiveBlocks), unsafe.Sizeof(c.effective_blocks))
	check("EffectiveTokens", unsafe.Offsetof(g.EffectiveTokens), unsafe.Offsetof(c.effective_tokens), unsafe.Sizeof(g.EffectiveTokens), unsafe.Sizeof(c.effective_tokens))
	check("ActivePrefillTokens", unsafe.Offsetof(g.ActivePrefillTokens), unsafe.Offsetof(c.active_prefill_tokens), unsafe.Sizeof(g.ActivePrefillTokens), unsafe.Sizeof(c.active_prefill_tokens))
	check("ActiveDecodeBlocks", unsafe.Offsetof(g.ActiveDecodeBlocks), unsafe.Offsetof(c.active_decode_blocks), unsafe.Sizeof(g.ActiveDecodeBlocks), unsafe.Sizeof(c.active_decode_blocks))
	check("ActiveRequests", unsafe.Offsetof(g.ActiveRequests), unsafe.Offsetof(c.active_requests), unsafe.Sizeof(g.ActiveRequests), unsafe.Sizeof(c.active_requests))
	check("BaseMs", unsafe.Offsetof(g.BaseMs), unsafe.Offsetof(c.base_ms), unsafe.Sizeof(g.BaseMs), unsafe.Sizeof(c.base_ms))
	check("MsPerPrefillToken", unsafe.Offsetof(g.MsPerPrefillToken), unsafe.Offsetof(c.ms_per_prefill_token), unsafe.Sizeof(g.MsPerPrefillToken), unsafe.Sizeof(c.ms_per_prefill_token))
	check("MsPerActiveRequest", unsafe.Offsetof(g.MsPerActiveRequest), unsafe.Offsetof(c.ms_per_active_request), unsafe.Sizeof(g.MsPerActiveRequest), unsafe.Sizeof(c.ms_per_active_request))
	var hr BlockRange
	var cr C.libroute_block_range
	check("BlockRange", unsafe.Offsetof(hr.End), unsafe.Offsetof(cr.end), unsafe.Sizeof(hr), unsafe.Sizeof(cr))
	var hp PreferredTaint
	var cp C.libroute_preferred_taint
	check("PreferredTaint.Taint", unsafe.Offsetof(hp.Taint), unsafe.Offsetof(cp.taint), unsafe.Sizeof(hp.Taint), unsafe.Sizeof(cp.taint))
	check("PreferredTaint.Weight", unsafe.Offsetof(hp.Weight), unsafe.Offsetof(cp.weight), unsafe.Sizeof(hp.Weight), unsafe.Sizeof(cp.weight))
	check("PreferredTaint", 0, 0, unsafe.Sizeof(hp), unsafe.Sizeof(cp))
	return bad
}
