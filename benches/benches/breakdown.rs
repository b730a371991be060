//! Where one selection's time goes, at 1,024 candidates: the pipeline alone (validation,
//! eligibility, overload), plus a trivial scorer, plus the default cost, and the full default
//! policy. `cargo bench -p libroute-benches --bench breakdown`.

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_benches::bench_fleet;
use libroute_core::{
    Cache, Candidates, ComponentError, DefaultCost, DefaultPicker, Leg, Load, Pick, PickInput,
    PickReason, Picker, Policy, RandomSource, Request, RequestView, Row, Scorer, Selector,
    WorkerInputs, WorkerKey,
};
use std::hint::black_box;

fn breakdown(c: &mut Criterion) {
    let rows = bench_fleet(1024);
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
