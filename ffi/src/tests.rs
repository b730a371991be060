//! The extern functions called from Rust, as C would call them. Small enough to run under Miri,
//! which checks every pointer the ABI dereferences.

// Why: tests pass references where C passes pointers; the coercion is the point.
#![allow(clippy::borrow_as_ptr)]

use std::ffi::{c_char, c_void};
use std::ptr;

use super::*;
use crate::status::boundary;

fn new_policy(json: &str) -> Result<*mut libroute_policy, libroute_status> {
    let mut p = ptr::null_mut();
    // SAFETY: a valid buffer and out-pointer.
    let rc = unsafe { libroute_policy_new(json.as_ptr().cast(), json.len(), &raw mut p) };
    if rc == libroute_status::Ok {
        Ok(p)
    } else {
        Err(rc)
    }
}

fn new_selector(capacity: usize) -> *mut libroute_selector {
    let mut s = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = unsafe { libroute_selector_new(capacity, 7, &raw mut s) };
    assert_eq!(rc, libroute_status::Ok);
    s
}

fn request(prompt: u64) -> libroute_request {
    libroute_request {
        prompt_tokens: prompt,
        block_size: 16,
        role: libroute_role::Aggregated as u32,
        track_prefill_tokens: 1,
        conditional_disagg: 0,
        has_tier_matches: 1,
        has_pin: 0,
        has_shared_hits: 0,
        pin: libroute_worker {
            worker_id: 0,
            dp_rank: 0,
        },
        required_taints: 0,
        preferred_taints: ptr::null(),
        preferred_taints_len: 0,
        shared_hits: ptr::null(),
        shared_hits_len: 0,
        has_session: 0,
        session: 0,
    }
}

fn row(id: u64, device: u32, decode: u64) -> libroute_row {
    libroute_row {
        worker: libroute_worker {
            worker_id: id,
            dp_rank: 0,
        },
        taints: 0,
        flags: LIBROUTE_ROW_HAS_CACHE | LIBROUTE_ROW_HAS_LOAD,
        device_blocks: device,
        host_blocks: 0,
        disk_blocks: 0,
        effective_blocks: f64::from(device),
        effective_tokens: u64::from(device) * 16,
        active_prefill_tokens: 0,
        active_decode_blocks: decode,
        active_requests: 0,
        base_ms: 0.0,
        ms_per_prefill_token: 0.0,
        ms_per_active_request: 0.0,
    }
}

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    let mut n = 0;
    // SAFETY: a valid buffer and out-pointer.
    let rc = unsafe { libroute_last_error(buf.as_mut_ptr(), buf.len(), &raw mut n) };
    assert_eq!(rc, libroute_status::Ok);
    String::from_utf8(buf[..n].iter().map(|&c| c.to_ne_bytes()[0]).collect()).unwrap()
}

fn select(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    req: &libroute_request,
    rows: &[libroute_row],
) -> Result<(libroute_selection, Vec<f64>), libroute_status> {
    // SAFETY: `libroute_selection` is plain data; zero is a valid placeholder.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    let mut parts = [f64::NAN; 8];
    // SAFETY: live handles, a valid request and arrays.
    let rc = unsafe {
        libroute_select(
            policy,
            selector,
            req,
            rows.as_ptr(),
            rows.len(),
            &raw mut out,
            parts.as_mut_ptr(),
            parts.len(),
        )
    };
    if rc == libroute_status::Ok {
        Ok((out, parts[..out.scorers].to_vec()))
    } else {
        Err(rc)
    }
}

#[test]
fn a_selection_through_the_abi_matches_the_spec() {
    let policy = new_policy(r#"{"prefill_load_scale": 2}"#).unwrap();
    let selector = new_selector(8);
    let mut req = request(64);
    req.role = libroute_role::Prefill as u32;
    let mut r = row(0, 6, 5);
    r.effective_tokens = 96;
    r.active_prefill_tokens = 16;
    let (sel, parts) = select(policy, selector, &req, &[r]).unwrap();
    assert_eq!(
        (sel.row, sel.cost, sel.request_blocks, sel.cached_tokens),
        (0, 7.0, 4, 96)
    );
    assert_eq!(parts, [7.0]);
    assert_eq!(sel.reason, libroute_reason::MinCost as u32);
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

#[test]
fn null_handles_and_arrays_are_errors_and_free_null_is_a_no_op() {
    let policy = new_policy("").unwrap();
    let selector = new_selector(4);
    let req = request(16);
    let rows = [row(1, 0, 0)];
    let mut unused = ptr::null_mut();
    // SAFETY: `out` is a valid placeholder; the NULL arguments are the point.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    // SAFETY: every non-NULL argument is valid.
    unsafe {
        assert_eq!(
            libroute_select(
                ptr::null(),
                selector,
                &req,
                rows.as_ptr(),
                1,
                &raw mut out,
                ptr::null_mut(),
                0
            ),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_select(
                policy,
                ptr::null_mut(),
                &req,
                rows.as_ptr(),
                1,
                &raw mut out,
                ptr::null_mut(),
                0
            ),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_select(
                policy,
                selector,
                ptr::null(),
                rows.as_ptr(),
                1,
                &raw mut out,
                ptr::null_mut(),
                0
            ),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_select(
                policy,
                selector,
                &req,
                ptr::null(),
                1,
                &raw mut out,
                ptr::null_mut(),
                0
            ),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_select(
                policy,
                selector,
                &req,
                rows.as_ptr(),
                1,
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_select(
                policy,
                selector,
                &req,
                ptr::null(),
                0,
                &raw mut out,
                ptr::null_mut(),
                0
            ),
            libroute_status::NoEndpoints
        );
        assert_eq!(
            libroute_policy_new(ptr::null(), 3, &raw mut unused),
            libroute_status::NullArgument
        );
        libroute_policy_free(ptr::null_mut());
        libroute_selector_free(ptr::null_mut());
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

#[test]
fn configuration_errors_name_the_key_or_knob() {
    assert_eq!(new_policy("{"), Err(libroute_status::InvalidJson));
    assert_eq!(
        new_policy(r#"{"temprature": 1}"#),
        Err(libroute_status::UnknownKey)
    );
    assert!(last_error().contains("temprature"), "{}", last_error());
    assert_eq!(
        new_policy(r#"{"host_cache_hit_weight": 1.5}"#),
        Err(libroute_status::InvalidKnob)
    );
    assert_eq!(
        last_error(),
        "invalid host_cache_hit_weight = 1.5: must be within [0, 1]"
    );
    assert_eq!(
        new_policy(r#"{"temperature": "hot"}"#),
        Err(libroute_status::InvalidJson)
    );
    let mut p = ptr::null_mut();
    let bytes = [0xff_u8, 0xfe];
    // SAFETY: a valid buffer and out-pointer.
    let rc = unsafe { libroute_policy_new(bytes.as_ptr().cast(), 2, &raw mut p) };
    assert_eq!(rc, libroute_status::InvalidJson);
    assert!(p.is_null(), "out-parameters are written only on success");
}

#[test]
fn out_of_range_values_from_c_are_rejected() {
    let policy = new_policy("").unwrap();
    let selector = new_selector(2);
    let rows = [row(1, 0, 0), row(2, 0, 0), row(3, 0, 0)];
    assert_eq!(
        select(policy, selector, &request(16), &rows),
        Err(libroute_status::CapacityExceeded)
    );
    let mut req = request(16);
    req.role = 9;
    assert_eq!(
        select(policy, selector, &req, &rows[..1]),
        Err(libroute_status::InvalidArgument)
    );
    assert!(last_error().contains("role 9"));
    let mut req = request(16);
    req.has_tier_matches = 2;
    assert_eq!(
        select(policy, selector, &req, &rows[..1]),
        Err(libroute_status::InvalidArgument)
    );
    let mut nan = row(1, 1, 0);
    nan.effective_blocks = f64::NAN;
    assert_eq!(
        select(policy, selector, &request(16), &[nan]),
        Err(libroute_status::InvalidRow)
    );
    assert_eq!(
        last_error(),
        "invalid row 0: effective_blocks is NaN, infinite or negative"
    );
    let mut flags = row(1, 1, 0);
    flags.flags = 64;
    assert_eq!(
        select(policy, selector, &request(16), &[flags]),
        Err(libroute_status::InvalidRow)
    );
    let mut s = ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(
            libroute_selector_new(0, 0, &raw mut s),
            libroute_status::InvalidArgument
        );
        assert_eq!(
            libroute_selector_new(LIBROUTE_MAX_CAPACITY + 1, 0, &raw mut s),
            libroute_status::CapacityExceeded
        );
        let mut bits = 0u8;
        assert_eq!(
            libroute_policy_inputs(policy, 7, 0, &raw mut bits),
            libroute_status::InvalidArgument
        );
        assert_eq!(
            libroute_policy_inputs(policy, 2, 0, &raw mut bits),
            libroute_status::Ok
        );
        assert_eq!(
            bits,
            LIBROUTE_INPUT_CACHE | LIBROUTE_INPUT_LOAD | LIBROUTE_INPUT_PREFERRED_TAINT
        );
        assert_eq!(
            libroute_policy_inputs(policy, 1, 0, &raw mut bits),
            libroute_status::Ok
        );
        assert_eq!(bits, LIBROUTE_INPUT_LOAD | LIBROUTE_INPUT_PREFERRED_TAINT);
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

unsafe extern "C" fn add_half(
    user_data: *mut c_void,
    _: *const libroute_request_info,
    _: *const libroute_row,
    _: *const u32,
    len: usize,
    costs: *mut f64,
) -> i32 {
    // SAFETY: the tests pass a pointer to an f64 as user data.
    let value = unsafe { *user_data.cast::<f64>() };
    for k in 0..len {
        // SAFETY: `costs` holds `len` values.
        unsafe { costs.add(k).write(value) };
    }
    0
}

unsafe extern "C" fn failing_scorer(
    _: *mut c_void,
    _: *const libroute_request_info,
    _: *const libroute_row,
    _: *const u32,
    _: usize,
    _: *mut f64,
) -> i32 {
    42
}

unsafe extern "C" fn reject_odd(
    _: *mut c_void,
    _: *const libroute_request_info,
    row: *const libroute_row,
    verdict: *mut u32,
) -> i32 {
    // SAFETY: libroute passes a valid row and out-pointer.
    unsafe { verdict.write(u32::from((*row).worker.worker_id % 2 == 1)) };
    0
}

unsafe extern "C" fn bad_verdict(
    _: *mut c_void,
    _: *const libroute_request_info,
    _: *const libroute_row,
    verdict: *mut u32,
) -> i32 {
    // SAFETY: libroute passes a valid out-pointer.
    unsafe { verdict.write(7) };
    0
}

/// What [`count_and_price`] reads and counts: how often it was called, and what it then does.
struct Priced {
    calls: std::cell::Cell<usize>,
    /// Fail with this code instead of scoring, when not 0.
    fail: std::cell::Cell<i32>,
}

/// A scorer whose cost depends on the row (a quarter of the worker id, odd ranks a half more),
/// counting its calls in its `Priced` user data.
unsafe extern "C" fn count_and_price(
    user_data: *mut c_void,
    _: *const libroute_request_info,
    rows: *const libroute_row,
    order: *const u32,
    len: usize,
    costs: *mut f64,
) -> i32 {
    // SAFETY: the tests pass a `Priced` as user data, used by one thread.
    let priced = unsafe { &*user_data.cast::<Priced>() };
    priced.calls.set(priced.calls.get() + 1);
    if priced.fail.get() != 0 {
        return priced.fail.get();
    }
    for k in 0..len {
        // SAFETY: `order` and `costs` hold `len` values; each index is a row of `rows`.
        unsafe {
            let row = &*rows.add(*order.add(k) as usize);
            let cost = row.worker.worker_id as f64 * 0.25 + f64::from(row.worker.dp_rank) * 0.5;
            costs.add(k).write(cost);
        }
    }
    0
}

unsafe extern "C" fn keep_all(
    _: *mut c_void,
    _: *const libroute_request_info,
    _: *const libroute_row,
    verdict: *mut u32,
) -> i32 {
    // SAFETY: libroute passes a valid out-pointer.
    unsafe { verdict.write(0) };
    0
}

/// A policy of the default cost and C scorers selects exactly as the same policy behind a C
/// filter that keeps every row (which the engine asks row by row, so the default cost is not
/// scored in its one pass): the same selections, contributions and last costs, with and without
/// temperature; and its scorer is called once per selection, failing or not.
#[test]
fn c_scorers_with_the_default_cost_select_as_through_the_general_steps() {
    let mut rng = libroute_core::WyRand::with_seed(7);
    let mut next = |below: u64| libroute_core::rng::index(&mut rng, below);
    // Miri perturbs the last bits of each `exp` it evaluates (its floats are not deterministic),
    // so two samplings of the same costs agree only natively.
    let knobs: &[&str] = if cfg!(miri) {
        &["{}"]
    } else {
        &["{}", r#"{"temperature": 0.7}"#]
    };
    for knobs in knobs {
        let priced = Priced {
            calls: 0.into(),
            fail: 0.into(),
        };
        let scorer = libroute_scorer {
            callback: Some(count_and_price),
            user_data: (&raw const priced).cast_mut().cast(),
            inputs: 0,
        };
        let keep = libroute_filter {
            callback: Some(keep_all),
            user_data: ptr::null_mut(),
            inputs: 0,
        };
        let with_knobs = |filters: &[libroute_filter]| {
            let mut p = ptr::null_mut();
            // SAFETY: valid arrays and out-pointer.
            let rc = unsafe {
                libroute_policy_new_with_components(
                    knobs.as_ptr().cast(),
                    knobs.len(),
                    filters.as_ptr(),
                    filters.len(),
                    &raw const scorer,
                    1,
                    &raw mut p,
                )
            };
            assert_eq!(rc, libroute_status::Ok);
            p
        };
        let (one_pass, general) = (with_knobs(&[]), with_knobs(&[keep]));
        let (fast, slow) = (new_selector(16), new_selector(16));
        for _ in 0..40 {
            let rows: Vec<libroute_row> = (0..=next(12))
                .map(|i| {
                    let mut r = row(i, u32::try_from(next(5)).unwrap(), next(30));
                    r.worker.dp_rank = u32::from(next(4) == 0);
                    if next(8) == 0 {
                        r.flags |= LIBROUTE_ROW_OVERLOADED;
                    }
                    r
                })
                .collect();
            let req = request(16 * (1 + next(6)));
            let before = priced.calls.get();
            let picked = select(one_pass, fast, &req, &rows);
            assert!(priced.calls.get() <= before + 1, "asked at most once");
            assert_eq!(picked, select(general, slow, &req, &rows));
            let last = |s| {
                let (mut idx, mut costs, mut n) = ([0usize; 16], [0.0; 16], 0);
                // SAFETY: a live handle and valid buffers.
                let rc = unsafe {
                    libroute_selector_last_costs(
                        s,
                        idx.as_mut_ptr(),
                        costs.as_mut_ptr(),
                        16,
                        &raw mut n,
                    )
                };
                assert_eq!(rc, libroute_status::Ok);
                (idx[..n].to_vec(), costs[..n].to_vec())
            };
            if picked.is_ok() {
                assert_eq!(last(fast), last(slow));
            }
        }
        priced.fail.set(9);
        let rows = [row(1, 0, 0), row(2, 0, 3)];
        let before = priced.calls.get();
        assert_eq!(
            select(one_pass, fast, &request(32), &rows),
            Err(libroute_status::ScorerFailed)
        );
        assert_eq!(
            priced.calls.get(),
            before + 1,
            "a failing scorer is asked once"
        );
        assert!(last_error().contains("code 9"), "{}", last_error());
        // SAFETY: live handles.
        unsafe {
            libroute_policy_free(one_pass);
            libroute_policy_free(general);
            libroute_selector_free(fast);
            libroute_selector_free(slow);
        }
    }
}

fn policy_with(
    filters: &[libroute_filter],
    scorers: &[libroute_scorer],
) -> Result<*mut libroute_policy, libroute_status> {
    let mut p = ptr::null_mut();
    // SAFETY: valid arrays and out-pointer.
    let rc = unsafe {
        libroute_policy_new_with_components(
            ptr::null(),
            0,
            filters.as_ptr(),
            filters.len(),
            scorers.as_ptr(),
            scorers.len(),
            &raw mut p,
        )
    };
    if rc == libroute_status::Ok {
        Ok(p)
    } else {
        Err(rc)
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario per callback outcome, in sequence"
)]
fn callbacks_compose_with_the_default_cost_and_their_failures_are_codes() {
    let mut half = 0.5f64;
    let scorer = libroute_scorer {
        callback: Some(add_half),
        user_data: (&raw mut half).cast(),
        inputs: 0,
    };
    let filter = libroute_filter {
        callback: Some(reject_odd),
        user_data: ptr::null_mut(),
        inputs: LIBROUTE_INPUT_LOAD,
    };
    let policy = policy_with(&[filter], &[scorer]).unwrap();
    let selector = new_selector(16);
    let rows = [row(1, 0, 0), row(2, 0, 3), row(4, 0, 1)];
    let (sel, parts) = select(policy, selector, &request(32), &rows).unwrap();
    assert_eq!((sel.worker.worker_id, sel.candidates), (4, 2));
    assert_eq!(parts, [2.0 + 1.0, 0.5]);
    assert_eq!(sel.cost, 3.5);
    let mut idx = [0usize; 4];
    let mut costs = [0.0; 4];
    let mut n = 0;
    // SAFETY: valid buffers.
    unsafe {
        assert_eq!(
            libroute_selector_last_costs(
                selector,
                idx.as_mut_ptr(),
                costs.as_mut_ptr(),
                4,
                &raw mut n
            ),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_selector_last_costs(
                selector,
                idx.as_mut_ptr(),
                costs.as_mut_ptr(),
                1,
                &raw mut n
            ),
            libroute_status::BufferTooSmall
        );
    }
    assert_eq!(
        (n, &idx[..2], &costs[..2]),
        (2, &[1usize, 2][..], &[5.5, 3.5][..])
    );
    // SAFETY: a live handle.
    unsafe { libroute_policy_free(policy) };

    let mut nan = f64::NAN;
    let nan_scorer = libroute_scorer {
        callback: Some(add_half),
        user_data: (&raw mut nan).cast(),
        inputs: 0,
    };
    let policy = policy_with(&[], &[nan_scorer]).unwrap();
    assert_eq!(
        select(policy, selector, &request(32), &rows),
        Err(libroute_status::NonFiniteCost)
    );
    assert_eq!(
        last_error(),
        "scorer 1 gave row 0 a non-finite or unwritten cost"
    );
    // SAFETY: a live handle.
    unsafe { libroute_policy_free(policy) };

    let failing = libroute_scorer {
        callback: Some(failing_scorer),
        user_data: ptr::null_mut(),
        inputs: 0,
    };
    let policy = policy_with(&[], &[failing]).unwrap();
    assert_eq!(
        select(policy, selector, &request(32), &rows),
        Err(libroute_status::ScorerFailed)
    );
    assert!(last_error().contains("code 42"), "{}", last_error());
    // SAFETY: a live handle.
    unsafe { libroute_policy_free(policy) };

    let weird = libroute_filter {
        callback: Some(bad_verdict),
        user_data: ptr::null_mut(),
        inputs: 0,
    };
    let policy = policy_with(&[weird], &[]).unwrap();
    assert_eq!(
        select(policy, selector, &request(32), &rows),
        Err(libroute_status::FilterFailed)
    );
    assert!(last_error().contains("not a libroute_verdict"));
    // SAFETY: live handles.
    unsafe {
        libroute_policy_free(policy);
        libroute_selector_free(selector);
    }

    let null_cb = libroute_scorer {
        callback: None,
        user_data: ptr::null_mut(),
        inputs: 0,
    };
    assert_eq!(
        policy_with(&[], &[null_cb]),
        Err(libroute_status::NullArgument)
    );
    let bad_bits = libroute_scorer {
        callback: Some(failing_scorer),
        user_data: ptr::null_mut(),
        inputs: 32,
    };
    assert_eq!(
        policy_with(&[], &[bad_bits]),
        Err(libroute_status::InvalidArgument)
    );
    assert_eq!(
        policy_with(&[], &[failing; 8]),
        Err(libroute_status::TooManyComponents)
    );
}

#[test]
fn contributions_buffer_too_small_is_checked_before_selecting() {
    let policy = new_policy("").unwrap();
    let selector = new_selector(4);
    // SAFETY: `out` placeholder, valid arrays.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    let rows = [row(1, 0, 0)];
    let mut parts = [0.0f64; 1];
    // SAFETY: valid handles and buffers; a zero length with a non-NULL buffer is the point.
    let rc = unsafe {
        libroute_select(
            policy,
            selector,
            &request(16),
            rows.as_ptr(),
            1,
            &raw mut out,
            parts.as_mut_ptr(),
            0,
        )
    };
    assert_eq!(rc, libroute_status::BufferTooSmall);
    // SAFETY: live handles.
    unsafe {
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

#[test]
fn every_status_has_a_message_and_unknown_codes_are_invalid_arguments() {
    let mut buf = [0 as c_char; 128];
    let mut n = 0;
    for status in libroute_status::ALL {
        // SAFETY: a valid buffer and out-pointer.
        let rc = unsafe {
            libroute_status_message(status as u32, buf.as_mut_ptr(), buf.len(), &raw mut n)
        };
        assert_eq!(rc, libroute_status::Ok);
        assert_eq!(n, status.message().len());
    }
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            libroute_status_message(12345, buf.as_mut_ptr(), buf.len(), &raw mut n),
            libroute_status::InvalidArgument
        );
        assert_eq!(
            libroute_status_message(0, buf.as_mut_ptr(), 2, &raw mut n),
            libroute_status::BufferTooSmall
        );
    }
    let mut values: Vec<u32> = libroute_status::ALL.iter().map(|s| *s as u32).collect();
    values.dedup();
    assert_eq!(
        values.len(),
        libroute_status::ALL.len(),
        "status values are distinct"
    );
}

#[test]
fn the_version_is_the_package_version() {
    // SAFETY: the version string is static and NUL-terminated.
    let v = unsafe { std::ffi::CStr::from_ptr(libroute_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn a_panic_inside_becomes_a_status() {
    let rc = boundary(|| panic!("boom"));
    assert_eq!(rc, libroute_status::Panic);
    assert_eq!(last_error(), "libroute panicked: boom");
}

#[test]
fn the_router_indexes_routes_books_and_frees() {
    let config = libroute_router_config {
        block_slots: 64,
        max_workers: 64,
        request_slots: 32,
        tombstones: 8,
        prediction_slots: 0,
        prediction_ttl: 0,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    let mut router = ptr::null_mut();
    // SAFETY: a valid config and out-pointer.
    let rc = unsafe { libroute_router_new(&raw const config, &raw mut router) };
    assert_eq!(rc, libroute_status::Ok);
    let policy = new_policy("").unwrap();
    let selector = new_selector(4);
    let hashes = [1u64, 2, 3, 4];
    let event = libroute_kv_event {
        kind: libroute_kv_kind::Stored as u32,
        worker: libroute_worker {
            worker_id: 2,
            dp_rank: 0,
        },
        tier: 0,
        hashes: hashes.as_ptr(),
        hashes_len: hashes.len(),
    };
    let mut rows = [row(1, 0, 0), row(2, 0, 0)];
    // SAFETY: `libroute_selection` and the counters are plain data.
    let (mut out, mut counters): (libroute_selection, libroute_router_counters) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    let req = request(64);
    // SAFETY: live handles and valid arrays throughout.
    unsafe {
        for id in [1, 2] {
            assert_eq!(
                libroute_router_add_worker(
                    router,
                    libroute_worker {
                        worker_id: id,
                        dp_rank: 0
                    }
                ),
                libroute_status::Ok
            );
        }
        assert_eq!(
            libroute_router_apply_kv_events(router, &raw const event, 1),
            libroute_status::Ok
        );
        let rc = libroute_router_route(
            router,
            policy,
            selector,
            &raw const req,
            hashes.as_ptr(),
            4,
            rows.as_mut_ptr(),
            2,
            9,
            0,
            &raw mut out,
        );
        assert_eq!(rc, libroute_status::Ok);
        assert_eq!((out.worker.worker_id, out.cached_tokens), (2, 64));
        assert_eq!(
            libroute_router_get_counters(router, &raw mut counters),
            libroute_status::Ok
        );
        assert_eq!((counters.blocks, counters.active_requests), (4, 1));
        assert_eq!(libroute_router_free_request(router, 9), libroute_status::Ok);
        assert_eq!(
            libroute_router_free_request(router, 9),
            libroute_status::UnknownRequest
        );
        libroute_router_free(router);
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one story: a snapshot, its refusals, the restore and the same next route"
)]
fn a_router_restored_from_its_snapshot_routes_and_frees_as_it_did() {
    let config = libroute_router_config {
        block_slots: 64,
        max_workers: 64,
        request_slots: 32,
        tombstones: 8,
        prediction_slots: 0,
        prediction_ttl: 0,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    let w = |id| libroute_worker {
        worker_id: id,
        dp_rank: 0,
    };
    let hashes = [1u64, 2, 3, 4];
    let event = libroute_kv_event {
        kind: libroute_kv_kind::Stored as u32,
        worker: w(2),
        tier: 0,
        hashes: hashes.as_ptr(),
        hashes_len: hashes.len(),
    };
    let policy = new_policy("").unwrap();
    let selector = new_selector(4);
    let req = request(64);
    let (mut a, mut b, mut wide) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: live handles, valid arrays and out-pointers throughout; each handle freed once.
    unsafe {
        let counters = |r| {
            let mut c = std::mem::zeroed::<libroute_router_counters>();
            assert_eq!(
                libroute_router_get_counters(r, &raw mut c),
                libroute_status::Ok
            );
            c
        };
        let route = |r, id| {
            let mut rows = [row(1, 0, 0), row(2, 0, 0)];
            let mut out = std::mem::zeroed::<libroute_selection>();
            let rc = libroute_router_route(
                r,
                policy,
                selector,
                &raw const req,
                hashes.as_ptr(),
                4,
                rows.as_mut_ptr(),
                2,
                id,
                0,
                &raw mut out,
            );
            assert_eq!(rc, libroute_status::Ok);
            (
                out.worker.worker_id,
                out.cached_tokens,
                rows[1].active_decode_blocks,
            )
        };
        for r in [&mut a, &mut b] {
            assert_eq!(
                libroute_router_new(&raw const config, r),
                libroute_status::Ok
            );
        }
        for id in [1, 2] {
            assert_eq!(libroute_router_add_worker(a, w(id)), libroute_status::Ok);
        }
        assert_eq!(
            libroute_router_apply_kv_events(a, &raw const event, 1),
            libroute_status::Ok
        );
        assert_eq!(route(a, 9), (2, 64, 0));

        // Asked with no room: the size, and nothing else.
        let mut size = 0;
        let rc = libroute_router_snapshot(a, ptr::null_mut(), 0, &raw mut size);
        assert_eq!(rc, libroute_status::BufferTooSmall);
        assert!(size > 0);
        assert_eq!(
            last_error(),
            format!("the snapshot takes {size} bytes; out_capacity is 0")
        );
        let mut bytes = vec![0u8; size + 3];
        let mut written = 0;
        let rc = libroute_router_snapshot(a, bytes.as_mut_ptr(), bytes.len(), &raw mut written);
        assert_eq!((rc, written), (libroute_status::Ok, size));
        bytes.truncate(size);

        // A cut snapshot names where it ends and changes nothing.
        let before = counters(b);
        let rc = libroute_router_restore(b, bytes.as_ptr(), size - 1);
        assert_eq!(rc, libroute_status::InvalidArgument);
        assert!(
            last_error().starts_with("snapshot byte "),
            "{}",
            last_error()
        );
        assert_eq!(counters(b), before);

        assert_eq!(
            libroute_router_restore(b, bytes.as_ptr(), size),
            libroute_status::Ok
        );
        assert_eq!(counters(b), counters(a));
        // The same next route on both (request 9's blocks are booked on worker 2 in both), and
        // the request booked before the snapshot frees on the restored router.
        assert_eq!(route(b, 10), route(a, 10));
        assert_eq!(libroute_router_free_request(b, 9), libroute_status::Ok);
        assert_eq!(libroute_router_free_request(b, 10), libroute_status::Ok);

        // Another worker width: named, nothing changed.
        let config256 = libroute_router_config {
            max_workers: 256,
            ..config
        };
        assert_eq!(
            libroute_router_new(&raw const config256, &raw mut wide),
            libroute_status::Ok
        );
        let rc = libroute_router_restore(wide, bytes.as_ptr(), size);
        assert_eq!(rc, libroute_status::InvalidArgument);
        assert!(
            last_error().starts_with("snapshot byte "),
            "{}",
            last_error()
        );
        assert_eq!(counters(wide).ledger_workers, 0);

        // A router reading engines' batches neither writes nor reads one.
        assert_eq!(
            libroute_router_read_kv_batches(b, 2, 64),
            libroute_status::Ok
        );
        let rc = libroute_router_snapshot(b, bytes.as_mut_ptr(), size, &raw mut written);
        assert_eq!(rc, libroute_status::InvalidArgument);
        assert!(
            last_error().contains("engines' KV batches"),
            "{}",
            last_error()
        );
        let rc = libroute_router_restore(b, bytes.as_ptr(), size);
        assert_eq!(rc, libroute_status::InvalidArgument);
        assert_eq!(
            libroute_router_snapshot(a, ptr::null_mut(), 0, ptr::null_mut()),
            libroute_status::NullArgument
        );

        for r in [a, b, wide] {
            libroute_router_free(r);
        }
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

#[test]
fn engine_kv_batches_and_block_hashes() {
    let config = libroute_router_config {
        block_slots: 64,
        max_workers: 64,
        request_slots: 32,
        tombstones: 0,
        prediction_slots: 0,
        prediction_ttl: 0,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    // [1, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, "GPU"]]]: block size 2.
    let mut payload = vec![0x92, 0x01, 0x91, 0x97, 0xab];
    payload.extend_from_slice(b"BlockStored");
    payload.extend_from_slice(&[0x92, 11, 12, 0xc0, 0x94, 1, 2, 3, 4, 2, 0xc0, 0xa3]);
    payload.extend_from_slice(b"GPU");
    let worker = libroute_worker {
        worker_id: 7,
        dp_rank: 0,
    };
    let mut router = ptr::null_mut();
    // SAFETY: valid pointers and lengths throughout; each handle is freed once.
    unsafe {
        assert_eq!(
            libroute_router_new(&raw const config, &raw mut router),
            libroute_status::Ok
        );
        let mut summary = std::mem::zeroed::<libroute_kv_batch_summary>();
        let sentinel = summary;
        assert_eq!(
            libroute_router_read_kv_batches(router, 2, 64),
            libroute_status::Ok
        );
        let rc =
            libroute_router_apply_kv_batch(router, worker, payload.as_ptr(), 20, &raw mut summary);
        assert_eq!(rc, libroute_status::InvalidArgument);
        assert_eq!(
            last_error(),
            "KV event payload, byte 20: the payload ends inside a value"
        );
        assert_eq!(summary, sentinel, "written only on success");
        let rc = libroute_router_apply_kv_batch(
            router,
            worker,
            payload.as_ptr(),
            payload.len(),
            &raw mut summary,
        );
        assert_eq!(rc, libroute_status::Ok);
        assert_eq!((summary.events, summary.stored_blocks), (1, 2));
        assert_eq!(
            libroute_router_apply_kv_batch(router, worker, ptr::null(), 3, ptr::null_mut()),
            libroute_status::NullArgument
        );

        let tokens = [1u32, 2, 3, 4, 5];
        let mut hashes = [0u64; 2];
        let mut written = 0;
        let rc = libroute_block_hashes(
            tokens.as_ptr(),
            tokens.len(),
            2,
            ptr::null(),
            0,
            hashes.as_mut_ptr(),
            1,
            &raw mut written,
        );
        assert_eq!((rc, written), (libroute_status::BufferTooSmall, 2));
        let rc = libroute_block_hashes(
            tokens.as_ptr(),
            tokens.len(),
            2,
            b"adapter".as_ptr(),
            7,
            hashes.as_mut_ptr(),
            2,
            &raw mut written,
        );
        assert_eq!((rc, written), (libroute_status::Ok, 2));
        let lora = hashes;
        let rc = libroute_block_hashes(
            tokens.as_ptr(),
            tokens.len(),
            2,
            ptr::null(),
            0,
            hashes.as_mut_ptr(),
            2,
            &raw mut written,
        );
        assert_eq!(rc, libroute_status::Ok);
        assert_ne!(lora, hashes, "the adapter's name salts the hashes");
        // The engine's blocks are the request's: worker 7 holds both.
        let mut counters = std::mem::zeroed::<libroute_router_counters>();
        libroute_router_get_counters(router, &raw mut counters);
        assert_eq!(counters.blocks, 2);
        libroute_router_free(router);
    }
}

#[test]
fn catalog_policies_explanations_and_policy_sets() {
    // Least loaded by active decode blocks (the rows' only load figure here): 5, 2, 9.
    let policy =
        new_policy(r#"{"type": "least_loaded", "metric": "active_blocks", "filters": [{"type": "allow_list", "workers": [1, 2]}]}"#)
            .unwrap();
    let selector = new_selector(4);
    let rows = [row(1, 0, 5), row(2, 0, 2), row(3, 0, 9)];
    let req = request(64);
    // SAFETY: plain data; zero is a valid placeholder.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut ex: [libroute_explanation; 3] = unsafe { std::mem::zeroed() };
    // SAFETY: live handles, a valid request, rows and buffers of the lengths given.
    let rc = unsafe {
        libroute_select_explained(
            policy,
            selector,
            &req,
            rows.as_ptr(),
            rows.len(),
            &raw mut out,
            ex.as_mut_ptr(),
            ex.len(),
        )
    };
    assert_eq!(rc, libroute_status::Ok);
    assert_eq!(out.worker.worker_id, 2);
    assert_eq!((ex[0].total, ex[1].total, ex[1].chosen), (5.0, 2.0, 1));
    assert_eq!(ex[2].disposition, libroute_disposition::Filtered as u32);
    assert!(ex[2].total.is_nan());
    // A buffer shorter than the rows is refused.
    // SAFETY: as above.
    let rc = unsafe {
        libroute_select_explained(
            policy,
            selector,
            &req,
            rows.as_ptr(),
            rows.len(),
            &raw mut out,
            ex.as_mut_ptr(),
            2,
        )
    };
    assert_eq!(rc, libroute_status::BufferTooSmall);

    let json = r#"{"instances": [{"name": "rr", "policy": {"type": "round_robin"}}], "roles": {"decode": "rr"}}"#;
    let mut set = ptr::null_mut();
    // SAFETY: a valid buffer and out-pointer.
    let rc = unsafe { libroute_policy_set_new(json.as_ptr().cast(), json.len(), &raw mut set) };
    assert_eq!(rc, libroute_status::Ok);
    let mut decode = ptr::null();
    let mut name = [0 as c_char; 8];
    // SAFETY: a live set, valid out-pointers and name buffer.
    let rc = unsafe {
        libroute_policy_set_get(
            set,
            libroute_role::Decode as u32,
            &raw mut decode,
            name.as_mut_ptr(),
            name.len(),
        )
    };
    assert_eq!(rc, libroute_status::Ok);
    let bytes: Vec<u8> = name[..3].iter().map(|&c| c.to_ne_bytes()[0]).collect();
    assert_eq!(bytes, b"rr\0");
    let first = select(decode, selector, &req, &rows)
        .unwrap()
        .0
        .worker
        .worker_id;
    let second = select(decode, selector, &req, &rows)
        .unwrap()
        .0
        .worker
        .worker_id;
    assert_eq!((first, second), (1, 2));
    // SAFETY: handles from their constructors, freed once.
    unsafe {
        libroute_policy_set_free(set);
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}

/// A router over `max_workers` 64 with `prediction_slots` (0: none).
fn new_router(prediction_slots: usize) -> *mut libroute_router {
    let config = libroute_router_config {
        block_slots: 256,
        max_workers: 64,
        request_slots: 64,
        tombstones: 8,
        prediction_slots,
        prediction_ttl: 3,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    let mut router = ptr::null_mut();
    // SAFETY: a valid config and out-pointer.
    let rc = unsafe { libroute_router_new(&raw const config, &raw mut router) };
    assert_eq!(rc, libroute_status::Ok);
    router
}

fn worker(id: u64) -> libroute_worker {
    libroute_worker {
        worker_id: id,
        dp_rank: 0,
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one story: two routers fed alike, one over rows and one over its fleet"
)]
fn the_fleet_routes_as_the_callers_rows_do() {
    let hashes: Vec<u64> = (1..=12).collect();
    let taints = |w: u64| if w % 3 == 0 { 0b10 } else { 0b01 };
    for prediction_slots in [0, 64] {
        let (over_rows, over_fleet) = (new_router(prediction_slots), new_router(prediction_slots));
        let policy = new_policy("").unwrap();
        let (selector_a, selector_b) = (new_selector(64), new_selector(64));
        // The fleet is given its workers out of order; it keeps them sorted, as the rows are.
        let mut rows: Vec<libroute_row> = (0..8)
            .map(|w| libroute_row {
                taints: taints(w),
                ..row(w, 0, 0)
            })
            .collect();
        // SAFETY: `libroute_selection` is plain data.
        let (mut a, mut b): (libroute_selection, libroute_selection) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: live handles and valid arrays throughout.
        unsafe {
            for w in [5, 0, 7, 2, 1, 6, 3, 4] {
                for r in [over_rows, over_fleet] {
                    assert_eq!(
                        libroute_router_add_worker(r, worker(w)),
                        libroute_status::Ok
                    );
                    let event = libroute_kv_event {
                        kind: libroute_kv_kind::Stored as u32,
                        worker: worker(w),
                        tier: u32::try_from(w % 3).unwrap(),
                        hashes: hashes.as_ptr(),
                        hashes_len: usize::try_from(w + 1).unwrap(),
                    };
                    assert_eq!(
                        libroute_router_apply_kv_events(r, &raw const event, 1),
                        libroute_status::Ok
                    );
                }
                assert_eq!(
                    libroute_router_fleet_add(over_fleet, worker(w), taints(w)),
                    libroute_status::Ok
                );
            }
            for id in 1..=40u64 {
                if id == 20 {
                    rows[5].flags |= LIBROUTE_ROW_OVERLOADED;
                    assert_eq!(
                        libroute_router_fleet_set_overloaded(over_fleet, worker(5), 1),
                        libroute_status::Ok
                    );
                }
                if id == 30 {
                    rows[2].taints = 0b11;
                    assert_eq!(
                        libroute_router_fleet_set_taints(over_fleet, worker(2), 0b11),
                        libroute_status::Ok
                    );
                }
                let len = usize::try_from(id % 12 + 1).unwrap();
                let req = request(16 * u64::try_from(len).unwrap());
                let rc = libroute_router_route(
                    over_rows,
                    policy,
                    selector_a,
                    &raw const req,
                    hashes.as_ptr(),
                    len,
                    rows.as_mut_ptr(),
                    rows.len(),
                    id,
                    id,
                    &raw mut a,
                );
                assert_eq!(rc, libroute_status::Ok, "route {id}: {}", last_error());
                let rc = libroute_router_route_fleet(
                    over_fleet,
                    policy,
                    selector_b,
                    &raw const req,
                    hashes.as_ptr(),
                    len,
                    id,
                    id,
                    &raw mut b,
                );
                assert_eq!(
                    rc,
                    libroute_status::Ok,
                    "fleet route {id}: {}",
                    last_error()
                );
                assert_eq!(a, b, "route {id}, {prediction_slots} prediction slots");
                // Some requests finish, so loads go down as well as up between routes.
                if id % 3 == 0 {
                    for r in [over_rows, over_fleet] {
                        assert_eq!(libroute_router_free_request(r, id - 1), libroute_status::Ok);
                    }
                }
            }
            let mut fleet_rows = vec![row(99, 0, 0); 8];
            let mut written = 0;
            assert_eq!(
                libroute_router_fleet_rows(
                    over_fleet,
                    fleet_rows.as_mut_ptr(),
                    8,
                    &raw mut written
                ),
                libroute_status::Ok
            );
            assert_eq!(written, 8);
            assert_eq!(format!("{fleet_rows:?}"), format!("{rows:?}"));
            // A timed route over the fleet checks its time as a timed route over rows does.
            let req = request(64);
            let rc = libroute_router_route_fleet_at(
                over_fleet,
                policy,
                selector_b,
                &raw const req,
                hashes.as_ptr(),
                4,
                100,
                f64::NAN,
                &raw mut b,
            );
            assert_eq!(rc, libroute_status::InvalidArgument);
            let rc = libroute_router_route_fleet_at(
                over_fleet,
                policy,
                selector_b,
                &raw const req,
                hashes.as_ptr(),
                4,
                100,
                5.0,
                &raw mut b,
            );
            assert_eq!(rc, libroute_status::Ok, "{}", last_error());
            for r in [over_rows, over_fleet] {
                libroute_router_free(r);
            }
            libroute_selector_free(selector_a);
            libroute_selector_free(selector_b);
            libroute_policy_free(policy);
        }
    }
}

#[test]
fn the_fleets_refusals_are_statuses_naming_the_worker() {
    let router = new_router(0);
    let policy = new_policy("").unwrap();
    let selector = new_selector(64);
    let req = request(64);
    // SAFETY: `libroute_selection` is plain data.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    // SAFETY: live handles and valid arrays throughout; NULLs where the test says.
    unsafe {
        let rc = libroute_router_route_fleet(
            router,
            policy,
            selector,
            &raw const req,
            ptr::null(),
            0,
            1,
            0,
            &raw mut out,
        );
        assert_eq!(rc, libroute_status::NoEndpoints, "an empty fleet");
        for w in 0..64 {
            assert_eq!(
                libroute_router_fleet_add(router, worker(w), 0),
                libroute_status::Ok
            );
        }
        assert_eq!(
            libroute_router_fleet_add(router, worker(64), 0),
            libroute_status::CapacityExceeded
        );
        assert_eq!(
            libroute_router_fleet_add(router, worker(3), 0),
            libroute_status::DuplicateWorker
        );
        assert!(last_error().contains("worker 3"), "{}", last_error());
        assert_eq!(
            libroute_router_fleet_set_overloaded(router, worker(3), 2),
            libroute_status::InvalidArgument
        );
        assert!(last_error().contains("overloaded"), "{}", last_error());
        assert_eq!(
            libroute_router_fleet_set_taints(router, worker(70), 1),
            libroute_status::UnknownWorker
        );
        // The chosen worker is not registered with the ledger: nothing is booked.
        let rc = libroute_router_route_fleet(
            router,
            policy,
            selector,
            &raw const req,
            ptr::null(),
            0,
            1,
            0,
            &raw mut out,
        );
        assert_eq!(rc, libroute_status::UnknownWorker);
        let mut written = 0;
        assert_eq!(
            libroute_router_fleet_rows(router, ptr::null_mut(), 0, &raw mut written),
            libroute_status::BufferTooSmall
        );
        assert_eq!(written, 64);
        assert_eq!(
            libroute_router_fleet_rows(router, ptr::null_mut(), 0, ptr::null_mut()),
            libroute_status::NullArgument
        );
        assert_eq!(
            libroute_router_fleet_remove(router, worker(3)),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_router_fleet_remove(router, worker(3)),
            libroute_status::UnknownWorker
        );
        // Removing a worker from the router takes it out of the fleet too.
        assert_eq!(
            libroute_router_remove_worker(router, worker(4)),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_router_fleet_rows(router, ptr::null_mut(), 0, &raw mut written),
            libroute_status::BufferTooSmall
        );
        assert_eq!(written, 62);
        assert_eq!(
            libroute_router_fleet_add(ptr::null_mut(), worker(1), 0),
            libroute_status::NullArgument
        );
        libroute_router_free(router);
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}
