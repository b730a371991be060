//! The replay simulator on tiny hand-made traces with hand-computed results, and its invariants
//! on the synthetic workload: conservation, determinism, hit rate under the ceiling.

use libroute_benches::sim::{self, Fleet, Synthetic, Trace, TraceRequest};

/// One worker whose costs are easy to add up: prefill 1 ms per uncached token, decode 1 ms a step.
fn fleet(cache_blocks: u64) -> Fleet {
    Fleet {
        workers: 1,
        cache_blocks,
        prefill_base_ms: 0.0,
        prefill_ms_per_token: 1.0,
        decode_base_ms: 1.0,
        decode_ms_per_token: 0.0,
        ..Fleet::default()
    }
}

fn req(at: f64, blocks: &[u64], output: u64) -> TraceRequest {
    TraceRequest {
        arrival_ms: at,
        input_tokens: blocks.len() as u64 * 10,
        output_tokens: output,
        blocks: blocks.to_vec(),
        session: None,
    }
}

fn trace(requests: Vec<TraceRequest>) -> Trace {
    Trace {
        requests,
        block_tokens: 10,
    }
}

fn run(t: &Trace, f: &Fleet) -> sim::Report {
    sim::replay(
        "default",
        t,
        f,
        &sim::policy(r#"{"type": "default"}"#).unwrap(),
    )
    .unwrap()
}

#[test]
fn fcfs_waits_and_the_hit_rate() {
    // R0 (2 blocks) prefills 0..20 ms. R1 arrives at 5, waits, finds blocks 1 and 2 cached at 20
    // and prefills its one new block 20..30: TTFT 20 and 25. Hits: 20 of 50 tokens.
    let t = trace(vec![req(0.0, &[1, 2], 1), req(5.0, &[1, 2, 3], 1)]);
    let r = run(&t, &fleet(10));
    assert_eq!((r.finished, r.not_admitted), (2, 0));
    assert_eq!(r.hit_rate, 0.4);
    assert_eq!(r.hit_rate_ceiling, 0.4);
    assert_eq!(r.ttft_mean_ms, 22.5);
    assert_eq!((r.ttft_p50_ms, r.ttft_p99_ms), (20.0, 25.0));
    // Both decode their one token in the step 30..31.
    assert_eq!(r.makespan_s, 0.031);
}

#[test]
fn least_recently_used_blocks_are_evicted_first() {
    // A 4-block cache. R0 [1 2] and R1 [3 4] finish in turn; R2 [5 6] evicts 1 and 2, the least
    // recently used; R3 [3 4 7] still finds 3 and 4 (evicting 5); R4 [1 2] finds nothing.
    let t = trace(vec![
        req(0.0, &[1, 2], 1),
        req(100.0, &[3, 4], 1),
        req(200.0, &[5, 6], 1),
        req(300.0, &[3, 4, 7], 1),
        req(400.0, &[1, 2], 1),
    ]);
    let r = run(&t, &fleet(4));
    assert_eq!(r.finished, 5);
    assert_eq!(r.hit_rate, 20.0 / 110.0);
    // With an infinite cache R3 and R4 would both hit two blocks.
    assert_eq!(r.hit_rate_ceiling, 40.0 / 110.0);
    // R3 prefills 10 tokens, the others 20 each: TTFTs 20, 20, 20, 10, 20.
    assert_eq!(r.ttft_mean_ms, 18.0);
}

#[test]
fn admission_waits_for_room_and_oversized_requests_are_reported() {
    // A 4-block cache. R0 pins 3 blocks while it decodes 50 tokens (prefill 0..30, steps
    // 30..80). R1 needs 2 new blocks: it waits until R0 finishes at 80, prefills 80..100 (TTFT
    // 99). R2 has 5 blocks, more than the cache: not admitted, and counted.
    let t = trace(vec![
        req(0.0, &[1, 2, 3], 50),
        req(1.0, &[4, 5], 1),
        req(2.0, &[6, 7, 8, 9, 10], 1),
    ]);
    let r = run(&t, &fleet(4));
    assert_eq!((r.requests, r.finished, r.not_admitted), (3, 2, 1));
    assert_eq!((r.ttft_p50_ms, r.ttft_p99_ms), (30.0, 99.0));
    assert_eq!(r.itl_mean_ms, 1.0);
}

fn synthetic() -> Trace {
    Synthetic {
        requests: 600,
        sessions: 60,
        ..Synthetic::default()
    }
    .generate()
}

#[test]
fn every_request_is_accounted_for_the_ceiling_holds_and_replays_repeat() {
    let t = synthetic();
    for approximate in [false, true] {
        let f = Fleet {
            workers: 4,
            cache_blocks: 256,
            approximate,
            ..Fleet::default()
        };
        for (name, json) in sim::builtin_policies(&f) {
            let p = sim::policy(&json).unwrap();
            let r = sim::replay(&name, &t, &f, &p).unwrap();
            assert_eq!(r.finished + r.not_admitted, r.requests, "{name}");
            assert!(r.hit_rate <= r.hit_rate_ceiling, "{name}: {r:?}");
            assert!(r.ttft_p50_ms <= r.ttft_p90_ms && r.ttft_p90_ms <= r.ttft_p99_ms);
            let again = sim::replay(&name, &t, &f, &sim::policy(&json).unwrap()).unwrap();
            assert_eq!(r, again, "{name}: same seed, same input, same output");
        }
    }
}

#[test]
fn mooncake_lines_parse_and_bad_ones_are_named() {
    let t = sim::parse_mooncake(
        "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [1, 2]}\n\
         {\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [1]}\n",
        512,
    )
    .unwrap();
    assert_eq!(t.requests.len(), 2);
    assert_eq!(t.requests[0].arrival_ms, 0.0, "sorted by arrival");
    let err = sim::parse_mooncake("{\"timestamp\": 1}\n", 512).unwrap_err();
    assert!(err.starts_with("trace line 1:"), "{err}");
}
