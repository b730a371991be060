//! Configuration text as hosts hand it over, the input's bytes read as JSON: a policy
//! (`libroute_policy_new`: the default policy's knobs, or a catalog policy by `"type"`) and a
//! policy set (`libroute_policy_set_new`: instances and roles). Each parse returns a policy or a
//! failure with a defined status and a sentence; a policy that parses selects over a small
//! fleet, for every role, and the selection names a given row with a finite cost, or fails with
//! a defined status. The dictionary `fuzz/dict/config.dict` holds the keys and type names.

use libroute_core::Role;
use route::host::{Policy, PolicySet, Selector};
use route::{Failure, RequestArgs, libroute_request, libroute_row, libroute_status, libroute_worker};

/// Every status the C ABI defines (`ffi/include/libroute.h`).
pub(crate) fn known(status: libroute_status) -> bool {
    let code = status as u32;
    code == 0
        || (100..=103).contains(&code)
        || (200..=203).contains(&code)
        || (300..=314).contains(&code)
        || (400..=402).contains(&code)
        || code == 900
}

fn refused(failure: &Failure) {
    assert!(known(failure.status()), "undefined status {}", failure.status() as u32);
    assert_ne!(failure.status(), libroute_status::Ok, "a failure with status OK");
    assert!(!failure.to_string().is_empty(), "a failure without a sentence");
}

/// Eight workers, two of them tainted, loaded unevenly, some with cached blocks.
fn fleet() -> Vec<libroute_row> {
    (0..8u32)
        .map(|i| libroute_row {
            worker: libroute_worker { worker_id: u64::from(i), dp_rank: 0 },
            taints: u64::from(i % 4 == 3),
            flags: 0b111,
            device_blocks: i % 3,
            host_blocks: i % 2,
            disk_blocks: 0,
            effective_blocks: f64::from(i % 3) + 0.5 * f64::from(i % 2),
            effective_tokens: u64::from(16 * (i % 3)),
            active_prefill_tokens: u64::from(100 * i),
            active_decode_blocks: u64::from(3 * i),
            active_requests: u64::from(i / 2),
            base_ms: 20.0,
            ms_per_prefill_token: 0.05,
            ms_per_active_request: 1.0,
        })
        .collect()
}

fn select(policy: &Policy, role: u32, rows: &[libroute_row]) {
    let head = libroute_request {
        prompt_tokens: 100,
        block_size: 16,
        role,
        track_prefill_tokens: 1,
        conditional_disagg: 0,
        has_tier_matches: 1,
        has_pin: 0,
        has_shared_hits: 0,
        pin: libroute_worker { worker_id: 0, dp_rank: 0 },
        required_taints: 0,
        preferred_taints: std::ptr::null(),
        preferred_taints_len: 0,
        shared_hits: std::ptr::null(),
        shared_hits_len: 0,
        has_session: 1,
        session: 42,
    };
    let request = RequestArgs { head: &head, preferred_taints: None, shared_hits: None };
    let mut selector = Selector::new(16, 7).expect("a valid capacity");
    let mut contributions = vec![0.0; policy.scorer_count()];
    match selector.select(policy, &request, rows, Some(&mut contributions)) {
        Ok(s) => {
            assert!(s.row < rows.len(), "row {} of {}", s.row, rows.len());
            assert_eq!(s.worker, rows[s.row].worker);
            assert!(s.cost.is_finite(), "cost {}", s.cost);
        }
        Err(failure) => refused(&failure),
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let rows = fleet();
    match Policy::from_json(data) {
        Ok(policy) => {
            for role in 0..4 {
                select(&policy, role, &rows);
            }
        }
        Err(failure) => refused(&failure),
    }
    match PolicySet::from_json(data) {
        Ok(set) => {
            for role in 0..4 {
                let core_role = Role::from_u32(role).expect("roles 0 to 3 are defined");
                assert!(!set.instance_name(core_role).contains('\0'));
                select(set.policy(core_role), role, &rows);
            }
        }
        Err(failure) => refused(&failure),
    }
}
