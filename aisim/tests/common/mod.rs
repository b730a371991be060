//! What the integration tests share: the real trace, read from `../shared/data`.

use libroute_benches::sim::{self, Trace};

/// The first `n` requests of the Mooncake conversation trace (`../shared/data` beside the
/// repository), or `None`, said loudly, where the data is absent.
pub fn mooncake(n: usize) -> Option<Trace> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/mooncake_conversation_trace.jsonl"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("SKIPPED: {path} is absent; only the built-in workload's cases ran");
        return None;
    };
    let mut trace = sim::parse_mooncake(&text, 512).unwrap();
    trace.requests.truncate(n);
    Some(trace)
}
