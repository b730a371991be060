package libroute

/*
#include <stdlib.h>
#include "libroute.h"

// Selects with explanations and, on failure, reads the detail in the same C call.
static libroute_status lr_select_explained(const libroute_policy *policy, libroute_selector *selector,
                                           const libroute_request *request, const libroute_row *rows,
                                           size_t rows_len, libroute_selection *out,
                                           libroute_explanation *ex, size_t ex_len,
                                           char *detail, size_t detail_len, size_t *detail_n) {
  libroute_status rc = libroute_select_explained(policy, selector, request, rows, rows_len, out, ex, ex_len);
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

// PolicySet holds named policy instances assigned to roles, from one JSON configuration:
// {"instances": [{"name": ..., "policy": {"type": ...}}], "roles": {"prefill": name, ...}}.
// Omitted roles use the default policy. Close frees it and every policy it lent.
type PolicySet struct {
	ptr *C.libroute_policy_set
	// Lent policies, one per role; they must not outlive the set.
	lent [4]*Policy
}

// NewPolicySet builds every instance and assigns them to roles. Errors name the instance,
// parameter or role at fault.
func NewPolicySet(config string) (*PolicySet, error) {
	text := C.CString(config)
	defer C.free(unsafe.Pointer(text))
	var ptr *C.libroute_policy_set
	if err := call(func() C.libroute_status {
		return C.libroute_policy_set_new(text, C.size_t(len(config)), &ptr)
	}); err != nil {
		return nil, err
	}
	s := &PolicySet{ptr: ptr}
	for role := range s.lent {
		var p *C.libroute_policy
		rc := C.libroute_policy_set_get(ptr, C.uint32_t(role), (**C.libroute_policy)(unsafe.Pointer(&p)), nil, 0)
		if rc != C.LIBROUTE_STATUS_OK {
			C.libroute_policy_set_free(ptr)
			return nil, &Error{Status: Status(rc)}
		}
		s.lent[role] = &Policy{ptr: p, lent: true}
	}
	runtime.SetFinalizer(s, (*PolicySet).Close)
	return s, nil
}

// Policy returns the policy serving role. It belongs to the set: do not Close it, and do not use
// it after the set is closed (it then reports ErrClosed).
func (s *PolicySet) Policy(role Role) *Policy {
	if int(role) >= len(s.lent) {
		return &Policy{}
	}
	return s.lent[role]
}

// InstanceName is the name of the instance serving role ("default" when none was assigned).
func (s *PolicySet) InstanceName(role Role) (string, error) {
	if s.ptr == nil {
		return "", ErrClosed
	}
	// Names are as long as the configuration made them: grow the buffer until one fits.
	for size := 256; ; size *= 2 {
		buf := (*C.char)(C.malloc(C.size_t(size)))
		var p *C.libroute_policy
		err := call(func() C.libroute_status {
			return C.libroute_policy_set_get(s.ptr, C.uint32_t(role), (**C.libroute_policy)(unsafe.Pointer(&p)), buf, C.size_t(size))
		})
		name := ""
		if err == nil {
			name = C.GoString(buf)
		}
		C.free(unsafe.Pointer(buf))
		runtime.KeepAlive(s)
		if !errors.Is(err, StatusBufferTooSmall) {
			return name, err
		}
	}
}

// Close frees the set; the policies it lent report ErrClosed afterwards. Idempotent.
func (s *PolicySet) Close() {
	if s.ptr != nil {
		for _, p := range s.lent {
			if p != nil {
				p.ptr = nil
			}
		}
		C.libroute_policy_set_free(s.ptr)
		s.ptr = nil
		runtime.SetFinalizer(s, nil)
	}
}

// Disposition says what became of a row in a selection.
type Disposition uint32

// The dispositions.
const (
	DispositionCandidate        Disposition = C.LIBROUTE_DISPOSITION_CANDIDATE
	DispositionNotPinned        Disposition = C.LIBROUTE_DISPOSITION_NOT_PINNED
	DispositionInvalid          Disposition = C.LIBROUTE_DISPOSITION_INVALID
	DispositionIneligible       Disposition = C.LIBROUTE_DISPOSITION_INELIGIBLE
	DispositionOverloaded       Disposition = C.LIBROUTE_DISPOSITION_OVERLOADED
	DispositionFiltered         Disposition = C.LIBROUTE_DISPOSITION_FILTERED
	DispositionFilterOverloaded Disposition = C.LIBROUTE_DISPOSITION_FILTER_OVERLOADED
	DispositionFilterFailed     Disposition = C.LIBROUTE_DISPOSITION_FILTER_FAILED
	DispositionNotExamined      Disposition = C.LIBROUTE_DISPOSITION_NOT_EXAMINED
)

// Explanation is one row's part in a selection, laid out as libroute_explanation so a slice of
// them is written by C in place.
type Explanation struct {
	Row         uintptr
	Worker      Worker
	Disposition Disposition
	// Filter is the index of the filter that removed the row (with the Filter* dispositions).
	Filter uint32
	Chosen uint8
	// Scorers is how many of Contributions are set.
	Scorers       uintptr
	Total         float64
	Contributions [8]float64
}

// SelectExplained is Select with an explanation of every row written into explanations (at
// least len(rows) long): whether it was a candidate or which check removed it, and for
// candidates each scorer's contribution and the total. Rows are explained also when the
// selection fails. The first call on a selector allocates its native explanation buffer.
func (s *Selector) SelectExplained(policy *Policy, req *Request, rows []Row, explanations []Explanation) (Selection, error) {
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
	var exPtr *C.libroute_explanation
	if len(explanations) > 0 {
		exPtr = (*C.libroute_explanation)(unsafe.Pointer(&explanations[0]))
	}
	rc := C.lr_select_explained(policy.ptr, s.ptr, c, rowsPtr, C.size_t(len(rows)), &s.out, exPtr,
		C.size_t(len(explanations)), &s.detail[0], C.size_t(len(s.detail)), &s.detailLen)
	runtime.KeepAlive(rows)
	runtime.KeepAlive(explanations)
	runtime.KeepAlive(req)
	runtime.KeepAlive(policy)
	runtime.KeepAlive(s)
	if rc != C.LIBROUTE_STATUS_OK {
		return Selection{}, &Error{Status: Status(rc), Detail: C.GoStringN(&s.detail[0], C.int(s.detailLen))}
	}
	return s.selection(false), nil
}

// explanationLayoutMismatches lists fields whose offsets differ between Explanation and
// libroute_explanation; the tests require none.
func explanationLayoutMismatches() []string {
	var g Explanation
	var c C.libroute_explanation
	var bad []string
	pairs := []struct {
		name        string
		goOff, cOff uintptr
	}{
		{"Row", unsafe.Offsetof(g.Row), unsafe.Offsetof(c.row)},
		{"Worker", unsafe.Offsetof(g.Worker), unsafe.Offsetof(c.worker)},
		{"Disposition", unsafe.Offsetof(g.Disposition), unsafe.Offsetof(c.disposition)},
		{"Filter", unsafe.Offsetof(g.Filter), unsafe.Offsetof(c.filter)},
		{"Chosen", unsafe.Offsetof(g.Chosen), unsafe.Offsetof(c.chosen)},
		{"Scorers", unsafe.Offsetof(g.Scorers), unsafe.Offsetof(c.scorers)},
		{"Total", unsafe.Offsetof(g.Total), unsafe.Offsetof(c.total)},
		{"Contributions", unsafe.Offsetof(g.Contributions), unsafe.Offsetof(c.contributions)},
		{"size", unsafe.Sizeof(g), unsafe.Sizeof(c)},
	}
	for _, p := range pairs {
		if p.goOff != p.cOff {
			bad = append(bad, p.name)
		}
	}
	return bad
}
