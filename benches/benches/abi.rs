//! The cost of one selection through the C ABI against the same selection in Rust, at 64 and
//! 1,024 candidates (`cargo bench -p libroute-benches --bench abi`). The ABI is called through a
//! function pointer the optimizer cannot see through, as a C host calls it.

// Why: calling the C ABI needs raw pointers, exactly as a C host does.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::ptr;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use libroute_benches::bench_fleet;
use libroute_core::{DefaultKnobs, Request, Selector};
use route::{
    libroute_policy, libroute_policy_free, libroute_policy_new_default, libroute_request,
    libroute_row, libroute_select, libroute_selection, libroute_selector, libroute_selector_free,
    libroute_selector_new, libroute_status, libroute_worker,
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

fn abi(c: &mut Criterion) {
    let mut group = c.benchmark_group("abi");
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Box::new(Selector::<4096>::new());
    let request = Request::new(2048, 16);
    let c_request = libroute_request {
        prompt_tokens: 2048,
        block_size: 16,
        role: 2,
        track_prefill_tokens: 1,
        conditional_disagg: 0,
        has_tier_matches: 0,
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
    };
    let mut c_policy = ptr::null_mut();
    let mut c_selector = ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(
            libroute_policy_new_default(&raw mut c_policy),
            libroute_status::Ok
        );
        assert_eq!(
            libroute_selector_new(4096, 0, &raw mut c_selector),
            libroute_status::Ok
        );
    }
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
        group.bench_with_input(BenchmarkId::new("c-abi", n), &rows, |b, rows| {
            // SAFETY: `libroute_row` has `Row`'s layout (a compile-time check in the ffi crate).
            let c_rows: *const libroute_row = rows.as_ptr().cast();
            // SAFETY: `libroute_selection` is plain data.
            let mut out: libroute_selection = unsafe { std::mem::zeroed() };
            b.iter(|| {
                // SAFETY: live handles, a valid request, `rows.len()` rows and an out-pointer.
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
    group.finish();
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(c_selector);
        libroute_policy_free(c_policy);
    }
}

criterion_group!(benches, abi);
criterion_main!(benches);
