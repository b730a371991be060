//! Where one selection's time goes, at 1,024 candidates: the pipeline alone (validation,
//! eligibility, overload), plus a trivial scorer, plus the default cost, and the full default
//! policy. `cargo bench -p libroute-benches --bench breakdown`.

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_core::{
    Cache, Candidates, ComponentError, DefaultCost, DefaultPicker, Leg, Load, Pick, PickInput,
    PickReason, Picker, Policy, RandomSource, Request, RequestView, Row, Scorer, Selector,
    WorkerInputs, WorkerKey,
};
use std::hint::black_box;

struct First;
impl Picker for First {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn pick(
        &self,
        _: &PickInput<'_>,
        _: &mut [f64],
        _: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        Ok(Pick {
            index: 0,
            reason: PickReason::Custom,
        })
    }
}
struct Zero;
impl Scorer for Zero {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _: &RequestView<'_>,
        _: &Candidates<'_>,
        c: &mut [f64],
    ) -> Result<(), ComponentError> {
        c.fill(0.0);
        Ok(())
    }
}
fn fleet(n: u64) -> Vec<Row> {
    (0..n)
        .map(|id| {
            let half_blocks = (id * 37) % 97;
            Row::new(WorkerKey::new(id, 0))
                .with_cache(Cache {
                    effective_blocks: half_blocks as f64 * 0.5,
                    effective_tokens: half_blocks * 8,
                    ..Cache::default()
                })
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: (id * 131) % 4096,
                    active_decode_blocks: (id * 17) % 509,
                    active_requests: id % 13,
                })
        })
        .collect()
}
fn breakdown(c: &mut Criterion) {
    let rows = fleet(1024);
    let request = Request::new(2048, 16);
    let mut s = Box::new(Selector::<4096>::new());
    let p0 = Policy::new((), (), First).unwrap();
    c.bench_function("pipeline-only", |b| {
        b.iter(|| {
            p0.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let p1 = Policy::new((), (Zero,), First).unwrap();
    c.bench_function("pipeline+zero-scorer", |b| {
        b.iter(|| {
            p1.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let p2 = Policy::new((), (DefaultCost::default(),), First).unwrap();
    c.bench_function("pipeline+default-scorer", |b| {
        b.iter(|| {
            p2.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let p3 = Policy::new((), (DefaultCost::default(),), DefaultPicker::default()).unwrap();
    c.bench_function("full", |b| {
        b.iter(|| {
            p3.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
}
criterion_group!(benches, breakdown);
criterion_main!(benches);
