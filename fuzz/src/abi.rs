//! The C ABI entry points with arbitrary bytes: configuration text, raw row bits, lengths, enum
//! values and booleans. Every call must return a defined status, write its out-parameter only on
//! success, and never crash. Lengths never exceed the buffers actually passed (beyond that the
//! caller breaks the documented contract, which no library can check).

use std::ptr;

use arbitrary::{Arbitrary, Unstructured};
use route::*;

use crate::config::known;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    config: &'a [u8],
    capacity: u16,
    entropy: u64,
    prompt_tokens: u64,
    block_size: u32,
    role: u32,
    bools: [u8; 5],
    pin: (u64, u32),
    required_taints: u64,
    preferred: Vec<(u32, f64)>,
    hits: Vec<(u64, u64)>,
    rows: Vec<[u64; 13]>,
    rows_len_cut: u8,
    contributions_len: u8,
    repeat: u8,
}

fn row_from(bits: &[u64; 13]) -> libroute_row {
    let narrow = |x: u64| x as u32;
    libroute_row {
        worker: libroute_worker { worker_id: bits[0] % 8, dp_rank: narrow(bits[1] % 2) },
        taints: bits[2],
        flags: narrow(bits[3]),
        device_blocks: narrow(bits[4]),
        host_blocks: narrow(bits[4] >> 32),
        disk_blocks: narrow(bits[5]),
        effective_blocks: f64::from_bits(bits[6]),
        effective_tokens: bits[7],
        active_prefill_tokens: bits[8],
        active_decode_blocks: bits[9],
        active_requests: bits[5] >> 32,
        base_ms: f64::from_bits(bits[10]),
        ms_per_prefill_token: f64::from_bits(bits[11]),
        ms_per_active_request: f64::from_bits(bits[12]),
    }
}


/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else { return };
    let mut policy: *mut libroute_policy = ptr::null_mut();
    // SAFETY: a valid buffer and out-pointer.
    let rc = unsafe { libroute_policy_new(input.config.as_ptr().cast(), input.config.len(), &raw mut policy) };
    assert!(known(rc));
    assert_eq!(rc == libroute_status::Ok, !policy.is_null(), "out written exactly on success");
    if policy.is_null() {
        // Fall back to the default so the selection paths are still exercised.
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { libroute_policy_new_default(&raw mut policy) }, libroute_status::Ok);
    }
    let mut selector: *mut libroute_selector = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = unsafe { libroute_selector_new(usize::from(input.capacity), input.entropy, &raw mut selector) };
    assert!(known(rc));
    if selector.is_null() {
        // SAFETY: a live policy.
        unsafe { libroute_policy_free(policy) };
        return;
    }
    let preferred: Vec<libroute_preferred_taint> =
        input.preferred.iter().map(|&(taint, weight)| libroute_preferred_taint { taint, weight }).collect();
    let hits: Vec<libroute_block_range> = input.hits.iter().map(|&(start, end)| libroute_block_range { start, end }).collect();
    let rows: Vec<libroute_row> = input.rows.iter().map(row_from).collect();
    let rows_len = rows.len().saturating_sub(usize::from(input.rows_len_cut) % (rows.len() + 1));
    let request = libroute_request {
        prompt_tokens: input.prompt_tokens,
        block_size: input.block_size,
        role: input.role % 6,
        track_prefill_tokens: input.bools[0] % 3,
        conditional_disagg: input.bools[1] % 3,
        has_tier_matches: input.bools[2] % 3,
        has_pin: input.bools[3] % 3,
        has_shared_hits: input.bools[4] % 3,
        pin: libroute_worker { worker_id: input.pin.0 % 8, dp_rank: input.pin.1 % 2 },
        required_taints: input.required_taints & 0xff,
        preferred_taints: if preferred.is_empty() { ptr::null() } else { preferred.as_ptr() },
        preferred_taints_len: preferred.len(),
        shared_hits: if hits.is_empty() { ptr::null() } else { hits.as_ptr() },
        shared_hits_len: hits.len(),
        // 2 must be rejected (a boolean other than 0 or 1), never read as true.
        has_session: input.bools[0].wrapping_add(input.bools[4]) % 3,
        session: input.required_taints.rotate_left(17),
    };
    let mut contributions = vec![f64::NAN; usize::from(input.contributions_len % 10)];
    for _ in 0..=input.repeat % 4 {
        // SAFETY: `libroute_selection` is plain data.
        let mut out: libroute_selection = unsafe { std::mem::zeroed() };
        let sentinel = out;
        // SAFETY: live handles; every array is valid for the length passed with it.
        let rc = unsafe {
            libroute_select(
                policy,
                selector,
                &raw const request,
                rows.as_ptr(),
                rows_len,
                &raw mut out,
                contributions.as_mut_ptr(),
                contributions.len(),
            )
        };
        assert!(known(rc), "undefined status {}", rc as u32);
        if rc == libroute_status::Ok {
            assert!(out.row < rows_len && out.cost.is_finite());
            assert_eq!(out.worker, rows[out.row].worker);
        } else {
            assert_eq!(out, sentinel, "out-parameters are written only on success");
        }
        let mut idx = vec![0usize; rows_len];
        let mut costs = vec![0.0f64; rows_len];
        let mut n = 0usize;
        // SAFETY: buffers of `rows_len` elements.
        let rc = unsafe { libroute_selector_last_costs(selector, idx.as_mut_ptr(), costs.as_mut_ptr(), rows_len, &raw mut n) };
        assert!(known(rc));
    }
    // SAFETY: live handles, freed once.
    unsafe {
        libroute_selector_free(selector);
        libroute_policy_free(policy);
    }
}
