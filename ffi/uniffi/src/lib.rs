//! The object facade of libroute: safe Rust objects and records over the safe layer of
//! `libroute-ffi` (`route::host`) and the core. The Kotlin and Swift bindings are generated from
//! this crate's library (`cargo xtask codegen`, uniffi's library mode), the Python extension
//! (`bindings/python`, PyO3) wraps its objects, and the JVM's library (`ffi/jvm`) links it with
//! the JNI fast path.
//!
//! Each object holds the safe layer's value behind a lock ([`Policy`] an `Arc` of
//! `host::Policy`, [`Selector`] a `host::Selector`, ...), converts its records to the C
//! vocabulary the safe layer reads (rows in the C layout, so packed rows are read in place), and
//! turns the safe layer's `Failure` into a [`RouteError`] (`RouteError::from_failure`): the
//! bindings make exactly the checks, decisions and errors that C and Go make, with the same
//! sentences. The crate has no unsafe code (`#![forbid(unsafe_code)]`).
//!
//! One module per object, as in the C ABI: [`Policy`] (`policy`), [`Selector`] (`selector`),
//! [`Router`] (`router`), [`PolicySet`] (`policy_set`); the records they pass by value and their
//! conversions to the C structs in `vocab`, and [`RouteError`] in `error`.
//!
//! [`Selector::select_raw`] and [`Router::route_raw`] take the C vocabulary directly, for the
//! hosts that keep their rows in that layout: the JVM fast path (`dev.libroute.DirectSelector`)
//! and the Python extension's NumPy path.
//!
//! Objects are thread-safe: a [`Policy`] is immutable and shared freely; a [`Selector`] and a
//! [`Router`] serialize their calls with a mutex (give each thread its own selector to avoid
//! waiting). Records are plain values: rows are copied into a reused buffer per call.

// Why: the facade stands on the safe layer (`route::host`) and the core; memory safety is
// their business, and this crate must not need unsafe code of its own.
#![forbid(unsafe_code)]
// Why: uniffi hands foreign values over by ownership (`String`, `Vec`, `Arc`), whether or not a
// method consumes them.
#![allow(
    clippy::needless_pass_by_value,
    reason = "uniffi passes foreign arguments by value"
)]

mod error;
mod policy;
mod policy_set;
mod router;
mod selector;
mod vocab;

pub use error::*;
pub use policy::*;
pub use policy_set::*;
pub use router::*;
pub use selector::*;
pub use vocab::*;

uniffi::setup_scaffolding!("libroute");

/// The library version, `MAJOR.MINOR.PATCH`.
#[uniffi::export]
#[must_use]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            prompt_tokens: 64,
            block_size: 16,
            role: Role::Aggregated,
            track_prefill_tokens: true,
            conditional_disagg: false,
            has_tier_matches: false,
            required_taints: 0,
            preferred_taints: Vec::new(),
            shared_hits: None,
            pin: None,
            session: None,
        }
    }

    fn row(worker_id: u64, device_blocks: u32) -> Row {
        Row {
            worker: Worker {
                worker_id,
                dp_rank: 0,
            },
            taints: 0,
            overloaded: false,
            cache: Some(RowCache {
                device_blocks,
                host_blocks: 0,
                disk_blocks: 0,
                effective_blocks: f64::from(device_blocks),
                effective_tokens: u64::from(device_blocks) * 16,
            }),
            load: None,
            speed: None,
        }
    }

    #[test]
    fn selects_the_cached_worker_with_its_breakdown() {
        let policy = Policy::new("{}".to_owned()).unwrap();
        let selector = Selector::new(16, 1).unwrap();
        let s = selector
            .select(policy, request(), vec![row(1, 0), row(2, 3)])
            .unwrap();
        // 4 blocks; worker 2 holds 3: cost 4 - 3 = 1 against 4.
        assert_eq!(s.worker.worker_id, 2);
        assert_eq!(s.cost, 1.0);
        assert_eq!(s.contributions, vec![1.0]);
        assert_eq!(s.reason, PickReason::MinCost { ties: 1 });
        let costs = selector.last_costs().unwrap();
        assert_eq!(
            costs,
            vec![
                Candidate { row: 0, cost: 4.0 },
                Candidate { row: 1, cost: 1.0 }
            ]
        );
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let err = Policy::new(r#"{"temperature": -1}"#.to_owned()).unwrap_err();
        assert!(matches!(err, RouteError::InvalidKnob { .. }), "{err:?}");
        assert!(err.message().contains("temperature"), "{err}");
        assert_eq!(err.code(), Some(202));
        let err = Policy::new(r#"{"temprature": 0}"#.to_owned()).unwrap_err();
        assert!(matches!(err, RouteError::UnknownKey { .. }), "{err:?}");
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(1, 1).unwrap();
        let err = selector
            .select(policy.clone(), request(), vec![row(1, 0), row(2, 0)])
            .unwrap_err();
        assert!(
            matches!(err, RouteError::CapacityExceeded { .. }),
            "{err:?}"
        );
        let mut nan = row(1, 1);
        nan.cache.as_mut().unwrap().effective_blocks = f64::NAN;
        let err = selector.select(policy, request(), vec![nan]).unwrap_err();
        assert!(matches!(err, RouteError::InvalidRow { .. }), "{err:?}");
        assert!(Selector::new(0, 0).is_err());
    }

    #[test]
    fn released_objects_fail_with_closed() {
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(4, 1).unwrap();
        policy.release();
        policy.release();
        let err = selector
            .select(policy.clone(), request(), vec![row(1, 0)])
            .unwrap_err();
        assert!(matches!(err, RouteError::Closed { .. }), "{err:?}");
        assert_eq!(err.code(), None);
        selector.release();
        assert!(matches!(
            selector.last_costs(),
            Err(RouteError::Closed { .. })
        ));
        assert!(matches!(
            policy.inputs(Role::Decode, false),
            Err(RouteError::Closed { .. })
        ));
    }

    #[test]
    fn the_router_routes_to_the_worker_holding_the_prefix_and_books_it() {
        let router = Router::new(RouterConfig {
            block_slots: 64,
            max_workers: 64,
            request_slots: 64,
            tombstones: 0,
            prediction_slots: 0,
            prediction_ttl: 0,
            host_weight: 0.0,
            disk_weight: 0.0,
        })
        .unwrap();
        let (a, b) = (
            Worker {
                worker_id: 1,
                dp_rank: 0,
            },
            Worker {
                worker_id: 2,
                dp_rank: 0,
            },
        );
        router.add_worker(a).unwrap();
        router.add_worker(b).unwrap();
        router
            .apply_kv_events(vec![KvEvent::Stored {
                worker: b,
                tier: Tier::Device,
                hashes: vec![11, 12, 13],
            }])
            .unwrap();
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(16, 1).unwrap();
        let candidates = vec![row(1, 0), row(2, 0)];
        let outcome = router
            .route(
                policy.clone(),
                selector.clone(),
                request(),
                vec![11, 12, 13, 14],
                candidates.clone(),
                7,
                0,
            )
            .unwrap();
        assert_eq!(outcome.selection.worker, b);
        assert_eq!(outcome.rows[1].cache.unwrap().device_blocks, 3);
        assert_eq!(router.counters().unwrap().active_requests, 1);
        let err = router
            .route(policy, selector, request(), vec![], candidates, 7, 0)
            .unwrap_err();
        assert!(
            matches!(err, RouteError::DuplicateRequest { .. }),
            "{err:?}"
        );
        router.free_request(7).unwrap();
        assert!(matches!(
            router.free_request(7),
            Err(RouteError::UnknownRequest { .. })
        ));
        router.release();
        assert!(matches!(router.counters(), Err(RouteError::Closed { .. })));
    }
}
