//! The cost of one selection through the C ABI against the same selection in Rust, at 64 and
//! 1,024 candidates, and of a router's whole decision through the C ABI (the `host` bench's
//! `router` workload at 1,024 workers, in the tables `libroute_router_new` allocates)
//! (`cargo bench -p libroute-benches --bench abi`). The ABI is called through a function pointer
//! the optimizer cannot see through, as a C host calls it.

// Why: calling the C ABI needs raw pointers, exactly as a C host does.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::ptr;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use libroute_benches::{bench_fleet, router_prompts};
use libroute_core::{DefaultKnobs, Request, Row, Selector, WorkerKey};
use route::{
    LIBROUTE_INPUT_LOAD, libroute_kv_event, libroute_kv_kind, libroute_policy,
    libroute_policy_free, libroute_policy_new_default, libroute_policy_new_with_components,
    libroute_request, libroute_request_info, libroute_router, libroute_router_add_worker,
    libroute_router_apply_kv_events, libroute_router_config, libroute_router_fleet_add,
    libroute_router_free, libroute_router_free_request, libroute_router_new, libroute_router_route,
    libroute_router_route_fleet, libroute_row, libroute_scorer, libroute_select,
    libroute_selection, libroute_selector, libroute_selector_free, libroute_selector_new,
    libroute_status, libroute_worker,
};

type SelectFn = unsafe extern "C" fn(
    *const libroute_policy,
    *mut libroute_selector,
    *const libroute_request,
    *const libroute_row,
    usize,
    *mut libroute_selection,
    *mut f64,
    usize,
) -> libroute_status;

/// The C ABI's request for `Request::new(2048, 16)`, with `has_tier_matches` as given.
fn c_request(has_tier_matches: u8) -> libroute_request {
    libroute_request {
        prompt_tokens: 2048,
        block_size: 16,
        role: 2,
        track_prefill_tokens: 1,
        conditional_disagg: 0,
        has_tier_matches,
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

/// The C ABI's default policy and an unseeded selector of `capacity` rows.
fn c_default(capacity: usize) -> (*mut libroute_policy, *mut libroute_selector) {
    let mut c_policy = ptr::null_mut();
    let mut c_selector = ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(
            libroute_policy_new_default(&raw mut c_policy),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_selector_new(capacity, 0, &raw mut c_selector),
            libroute_status::Ok
        );
    }
    (c_policy, c_selector)
}

/// A C scorer of the kind a server adds to the default cost: a hundredth of each candidate's
/// active requests.
unsafe extern "C" fn c_requests_scorer(
    _: *mut std::ffi::c_void,
    _: *const libroute_request_info,
    rows: *const libroute_row,
    order: *const u32,
    len: usize,
    costs: *mut f64,
) -> i32 {
    // SAFETY: libroute passes `len` indices into `rows` and `len` costs.
    let (order, costs) = unsafe {
        (
            std::slice::from_raw_parts(order, len),
            std::slice::from_raw_parts_mut(costs, len),
        )
    };
    for (cost, &i) in costs.iter_mut().zip(order) {
        // SAFETY: each index is a row of `rows`.
        let row = unsafe { &*rows.add(i as usize) };
        #[allow(clippy::cast_precision_loss, reason = "a bench's cost")]
        let requests = row.active_requests as f64;
        *cost = 0.01 * requests;
    }
    0
}

/// The C ABI's default cost with [`c_requests_scorer`] added.
fn c_with_scorer() -> *mut libroute_policy {
    let scorer = libroute_scorer {
        callback: Some(c_requests_scorer),
        user_data: ptr::null_mut(),
        inputs: LIBROUTE_INPUT_LOAD,
    };
    let mut policy = ptr::null_mut();
    // SAFETY: no knobs, no filters, one scorer, a valid out-pointer.
    let rc = unsafe {
        libroute_policy_new_with_components(
            ptr::null(),
            0,
            ptr::null(),
            0,
            &raw const scorer,
            1,
            &raw mut policy,
        )
    };
    assert_eq!(rc, libroute_status::Ok);
    policy
}

fn abi(c: &mut Criterion) {
    let mut group = c.benchmark_group("abi");
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Box::new(Selector::<4096>::new());
    let request = Request::new(2048, 16);
    let c_request = c_request(0);
    let (c_policy, c_selector) = c_default(4096);
    // The default cost plus a C scorer (`libroute_policy_new_with_components`).
    let c_scored = c_with_scorer();
    let select: SelectFn = black_box(libroute_select);
    for n in [64u64, 1024] {
        let rows = bench_fleet(n);
        group.bench_with_input(BenchmarkId::new("rust", n), &rows, |b, rows| {
            b.iter(|| {
                policy
                    .select(&mut selector, black_box(&request), black_box(rows))
                    .unwrap()
            });
        });
        for (name, c_policy) in [("c-abi", c_policy), ("c-abi/c-scorer", c_scored)] {
            group.bench_with_input(BenchmarkId::new(name, n), &rows, |b, rows| {
                // SAFETY: `libroute_row` has `Row`'s layout (a compile-time check in the ffi
                // crate).
                let c_rows: *const libroute_row = rows.as_ptr().cast();
                // SAFETY: `libroute_selection` is plain data.
                let mut out: libroute_selection = unsafe { std::mem::zeroed() };
                b.iter(|| {
                    // SAFETY: live handles, a valid request, `rows.len()` rows and an
                    // out-pointer.
                    let rc = unsafe {
                        select(
                            c_policy,
                            c_selector,
                            black_box(&raw const c_request),
                            c_rows,
                            rows.len(),
                            &raw mut out,
                            ptr::null_mut(),
                            0,
                        )
                    };
                    assert_eq!(rc, libroute_status::Ok);
                    black_box(out.row)
                });
            });
        }
    }
    group.finish();
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(c_selector);
        libroute_policy_free(c_policy);
        libroute_policy_free(c_scored);
    }
}

/// A C ABI router of `workers` workers, each registered, in the fleet, and holding the first 64
/// blocks of one of `prompts`.
fn c_router(workers: u64, prompts: &[Vec<u64>]) -> *mut libroute_router {
    let config = libroute_router_config {
        block_slots: 1 << 18,
        max_workers: 1024,
        request_slots: 1 << 12,
        tombstones: 64,
        prediction_slots: 0,
        prediction_ttl: 0,
        host_weight: 0.75,
        disk_weight: 0.25,
    };
    let mut c_router: *mut libroute_router = ptr::null_mut();
    // SAFETY: valid config and out-pointers; the events' hashes outlive the call.
    unsafe {
        assert_eq!(
            libroute_router_new(&raw const config, &raw mut c_router),
            libroute_status::Ok
        );
        for w in 0..workers {
            let worker = libroute_worker {
                worker_id: w,
                dp_rank: 0,
            };
            assert_eq!(
                libroute_router_add_worker(c_router, worker),
                libroute_status::Ok
            );
            assert_eq!(
                libroute_router_fleet_add(c_router, worker, 0),
                libroute_status::Ok
            );
            let prompt = &prompts[usize::try_from(w % 64).unwrap()];
            let stored = libroute_kv_event {
                kind: libroute_kv_kind::Stored as u32,
                worker,
                tier: 0,
                hashes: prompt.as_ptr(),
                hashes_len: 64,
            };
            assert_eq!(
                libroute_router_apply_kv_events(c_router, &raw const stored, 1),
                libroute_status::Ok
            );
        }
    }
    c_router
}

/// `router/c-abi/query+select+book/1024`: the `host` bench's `router` workload at 1,024 workers
/// (an index of 2^18 block slots, 64 prompts of 128 blocks, each worker holding the first 64
/// blocks of one) through `libroute_router_route`, over rows in the caller's memory in the same
/// order every call, as a C server keeps them; `router/c-abi/fleet/query+select+book/1024`, the
/// same routes over the router's fleet (`libroute_router_route_fleet`).
fn router(c: &mut Criterion) {
    let mut group = c.benchmark_group("router");
    let workers = 1024u64;
    let prompts = router_prompts();
    let c_router = c_router(workers, &prompts);
    let (c_policy, c_selector) = c_default(1024);
    let request = c_request(1);
    let mut rows: Vec<Row> = (0..workers)
        .map(|w| Row::new(WorkerKey::new(w, 0)))
        .collect();
    // SAFETY: `libroute_row` has `Row`'s layout (a compile-time check in the ffi crate).
    let c_rows: *mut libroute_row = rows.as_mut_ptr().cast();
    let rows_len = rows.len();
    // SAFETY: `libroute_selection` is plain data.
    let mut out: libroute_selection = unsafe { std::mem::zeroed() };
    let mut id = 0u64;
    // One route of the next prompt with `route` (given the prompt and the request id), then
    // the request freed, so the loads stay as they were.
    let mut bench =
        |name: &str, route: &dyn Fn(&[u64], u64, &mut libroute_selection) -> libroute_status| {
            group.bench_function(BenchmarkId::new(name, workers), |b| {
                b.iter(|| {
                    id += 1;
                    let prompt = &prompts[usize::try_from(id % 64).unwrap()];
                    assert_eq!(route(black_box(prompt), id, &mut out), libroute_status::Ok);
                    // SAFETY: a live handle.
                    let freed = unsafe { libroute_router_free_request(c_router, id) };
                    assert_eq!(freed, libroute_status::Ok);
                    black_box(out.row)
                });
            });
        };
    bench("c-abi/query+select+book", &|prompt, id, out| {
        // SAFETY: live handles, a valid request, the prompt's hashes, `workers` rows and an
        // out-pointer.
        unsafe {
            libroute_router_route(
                c_router,
                c_policy,
                c_selector,
                &raw const request,
                prompt.as_ptr(),
                prompt.len(),
                c_rows,
                rows_len,
                id,
                0,
                out,
            )
        }
    });
    bench("c-abi/fleet/query+select+book", &|prompt, id, out| {
        // SAFETY: live handles, a valid request, the prompt's hashes and an out-pointer.
        unsafe {
            libroute_router_route_fleet(
                c_router,
                c_policy,
                c_selector,
                &raw const request,
                prompt.as_ptr(),
                prompt.len(),
                id,
                0,
                out,
            )
        }
    });
    group.finish();
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(c_selector);
        libroute_policy_free(c_policy);
        libroute_router_free(c_router);
    }
}

criterion_group!(benches, abi, router);
criterion_main!(benches);
