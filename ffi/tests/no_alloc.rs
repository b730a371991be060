//! Zero heap allocations per warm selection through the C ABI (counted per thread), on the
//! success path at 1,024 candidates, with and without contributions and callbacks; and per warm
//! route of the C ABI's router, over the caller's rows and over its fleet, with predictions.

// Why: a counting global allocator and calls into the C ABI are both unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;

use route::*;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System`; counting touches only a thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded under the caller's obligations.
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded under the caller's obligations.
        unsafe { System.realloc(p, layout, size) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: forwarded under the caller's obligations.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

unsafe extern "C" fn per_request(
    _: *mut c_void,
    _: *const libroute_request_info,
    rows: *const libroute_row,
    order: *const u32,
    len: usize,
    costs: *mut f64,
) -> i32 {
    for k in 0..len {
        // SAFETY: libroute passes `len` order entries and costs, and rows they index.
        unsafe {
            costs
                .add(k)
                .write((*rows.add(*order.add(k) as usize)).active_requests as f64);
        };
    }
    0
}

/// An aggregated request of `prompt_tokens` in 16-token blocks with tier matches, requiring
/// `required_taints` and preferring `preferred` (which must outlive its use).
fn request(
    prompt_tokens: u64,
    required_taints: u64,
    preferred: &[libroute_preferred_taint],
) -> libroute_request {
    libroute_request {
        prompt_tokens,
        block_size: 16,
        role: 2,
        track_prefill_tokens: 1,
        conditional_disagg: 0,
        has_tier_matches: 1,
        has_pin: 0,
        has_shared_hits: 0,
        pin: libroute_worker {
            worker_id: 0,
            dp_rank: 0,
        },
        required_taints,
        preferred_taints: if preferred.is_empty() {
            ptr::null()
        } else {
            preferred.as_ptr()
        },
        preferred_taints_len: preferred.len(),
        shared_hits: ptr::null(),
        shared_hits_len: 0,
        has_session: 0,
        session: 0,
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "setup of a realistic request, then the measurement"
)]
fn warm_abi_selections_do_not_allocate() {
    let iterations = if cfg!(miri) { 10 } else { 10_000 };
    let rows: Vec<libroute_row> = (0..1024u64)
        .map(|id| libroute_row {
            worker: libroute_worker {
                worker_id: id,
                dp_rank: 0,
            },
            taints: 1,
            flags: 3,
            device_blocks: u32::try_from(id % 9).unwrap(),
            host_blocks: 2,
            disk_blocks: 1,
            effective_blocks: (id % 9) as f64,
            effective_tokens: (id % 9) * 16,
            active_prefill_tokens: id % 700,
            active_decode_blocks: id % 11,
            active_requests: id % 5,
            base_ms: 0.0,
            ms_per_prefill_token: 0.0,
            ms_per_active_request: 0.0,
        })
        .collect();
    let preferred = [libroute_preferred_taint {
        taint: 0,
        weight: 0.5,
    }];
    let request = request(2048, 1, &preferred);
    let scorer = libroute_scorer {
        callback: Some(per_request),
        user_data: ptr::null_mut(),
        inputs: 2,
    };
    let config = r#"{"temperature": 0.5, "seed": 3}"#;
    let (mut plain, mut composed, mut selector) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: valid buffers and out-pointers.
    unsafe {
        assert_eq!(
            libroute_policy_new(config.as_ptr().cast(), config.len(), &raw mut plain),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_policy_new_with_components(
                config.as_ptr().cast(),
                config.len(),
                ptr::null(),
                0,
                &raw const scorer,
                1,
                &raw mut composed
            ),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_selector_new(1024, 1, &raw mut selector),
            libroute_status::Ok
        );
    }
    let mut parts = [0.0f64; 2];
    for policy in [plain, composed] {
        // SAFETY: plain data.
        let mut out: libroute_selection = unsafe { std::mem::zeroed() };
        let select = |out: &mut libroute_selection, parts: &mut [f64; 2]| {
            // SAFETY: live handles, a valid request, rows and buffers.
            let rc = unsafe {
                libroute_select(
                    policy,
                    selector,
                    &raw const request,
                    rows.as_ptr(),
                    rows.len(),
                    out,
                    parts.as_mut_ptr(),
                    2,
                )
            };
            assert_eq!(rc, libroute_status::Ok);
        };
        select(&mut out, &mut parts);
        let before = ALLOCATIONS.with(Cell::get);
        for _ in 0..iterations {
            select(&mut out, &mut parts);
        }
        assert_eq!(ALLOCATIONS.with(Cell::get) - before, 0);
    }
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(selector);
        libroute_policy_free(plain);
        libroute_policy_free(composed);
    }
}

#[test]
fn the_counter_sees_allocations() {
    let before = ALLOCATIONS.with(Cell::get);
    std::hint::black_box(vec![0u8; 32]);
    assert_eq!(ALLOCATIONS.with(Cell::get) - before, 1);
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "setup of a router with KV events and a fleet, then the measurement"
)]
fn warm_router_routes_do_not_allocate() {
    let iterations: u64 = if cfg!(miri) { 10 } else { 2_000 };
    let config = libroute_router_config {
        block_slots: 1024,
        max_workers: 64,
        request_slots: 64,
        tombstones: 16,
        prediction_slots: 256,
        prediction_ttl: 4,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    let request = request(128, 0, &[]);
    let hashes: Vec<u64> = (1..=8).collect();
    let worker = |w: u64| libroute_worker {
        worker_id: w,
        dp_rank: 0,
    };
    let mut rows: Vec<libroute_row> = (0..64u64)
        .map(|w| libroute_row {
            worker: worker(w),
            taints: 0,
            flags: 0,
            device_blocks: 0,
            host_blocks: 0,
            disk_blocks: 0,
            effective_blocks: 0.0,
            effective_tokens: 0,
            active_prefill_tokens: 0,
            active_decode_blocks: 0,
            active_requests: 0,
            base_ms: 0.0,
            ms_per_prefill_token: 0.0,
            ms_per_active_request: 0.0,
        })
        .collect();
    let (mut router, mut policy, mut selector) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: plain data.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    // SAFETY: valid configs, out-pointers and arrays; live handles throughout.
    unsafe {
        assert_eq!(
            libroute_router_new(&raw const config, &raw mut router),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_policy_new_default(&raw mut policy),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_selector_new(64, 1, &raw mut selector),
            libroute_status::Ok
        );
        for w in 0..64u64 {
            assert_eq!(
                libroute_router_add_worker(router, worker(w)),
                libroute_status::Ok
            );
            assert_eq!(
                libroute_router_fleet_add(router, worker(w), 0),
                libroute_status::Ok
            );
            let event = libroute_kv_event {
                kind: libroute_kv_kind::Stored as u32,
                worker: worker(w),
                tier: u32::try_from(w % 3).unwrap(),
                hashes: hashes.as_ptr(),
                hashes_len: usize::try_from(w % 8 + 1).unwrap(),
            };
            assert_eq!(
                libroute_router_apply_kv_events(router, &raw const event, 1),
                libroute_status::Ok
            );
        }
        let mut route = |id: u64, fleet: bool| {
            let len = usize::try_from(id % 8 + 1).unwrap();
            let rc = if fleet {
                libroute_router_route_fleet(
                    router,
                    policy,
                    selector,
                    &raw const request,
                    hashes.as_ptr(),
                    len,
                    id,
                    id,
                    &raw mut out,
                )
            } else {
                libroute_router_route(
                    router,
                    policy,
                    selector,
                    &raw const request,
                    hashes.as_ptr(),
                    len,
                    rows.as_mut_ptr(),
                    rows.len(),
                    id,
                    id,
                    &raw mut out,
                )
            };
            assert_eq!(rc, libroute_status::Ok);
            assert_eq!(
                libroute_router_free_request(router, id),
                libroute_status::Ok
            );
        };
        route(1, false);
        route(2, true);
        let before = ALLOCATIONS.with(Cell::get);
        for id in 3..3 + iterations {
            route(id, id % 2 == 0);
        }
        assert_eq!(ALLOCATIONS.with(Cell::get) - before, 0);
        libroute_router_free(router);
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}
