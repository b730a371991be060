//! Where one selection's time goes, at 1,024 candidates. The general pipeline: alone
//! (validation, eligibility, overload), plus a trivial scorer, plus the default cost (wrapped so
//! it does not offer the one-pass capability). The one pass: the default cost with a trivial
//! picker. And the full default policy. For scale, the floor of any per-row formula over these
//! rows: reading four of each row's fields into one cost (`floor-four-fields`) and the minimum of
//! 1,024 costs in one dependent chain (`floor-min-chain`); and at T > 0, the platform `exp` the
//! sampler must call once per row to match Dynamo bit for bit (`floor-exp`: 1,024 calls, the
//! weights written and nothing else); and the three divisions by a constant per row that
//! `llm_d`'s three scorers need (`floor-three-divisions`: over contiguous columns, so two rows per
//! instruction, nothing else). `cargo bench -p libroute-benches --bench breakdown`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_benches::bench_fleet;
use libroute_core::{
    Candidates, ComponentError, DefaultCost, DefaultPicker, Leg, Pick, PickInput, PickReason,
    Picker, Policy, RandomSource, Request, RequestView, Scorer, Selector, WorkerInputs,
};

/// A picker that takes the first candidate and draws nothing.
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

/// A scorer that writes 0 for every candidate.
struct Zero;

impl Scorer for Zero {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _: &RequestView<'_>,
        _: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        costs.fill(0.0);
        Ok(())
    }
}

/// The default cost, through the general pipeline only (the wrapper does not offer the one-pass
/// capability).
struct General(DefaultCost);

impl Scorer for General {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.0.inputs(leg)
    }
    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        self.0.score(request, candidates, costs)
    }
}

fn breakdown(c: &mut Criterion) {
    let rows = bench_fleet(1024);
    let request = Request::new(2048, 16);
    let mut s = Box::new(Selector::<4096>::new());
    let pipeline = Policy::new((), (), First).unwrap();
    c.bench_function("pipeline-only", |b| {
        b.iter(|| {
            pipeline
                .select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let zero = Policy::new((), (Zero,), First).unwrap();
    c.bench_function("pipeline+zero-scorer", |b| {
        b.iter(|| {
            zero.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let general = Policy::new((), (General(DefaultCost::default()),), First).unwrap();
    c.bench_function("pipeline+default-scorer", |b| {
        b.iter(|| {
            general
                .select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let general_full = Policy::new(
        (),
        (General(DefaultCost::default()),),
        DefaultPicker::default(),
    )
    .unwrap();
    c.bench_function("pipeline+default-scorer+default-picker", |b| {
        b.iter(|| {
            general_full
                .select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let scored = Policy::new((), (DefaultCost::default(),), First).unwrap();
    c.bench_function("fused-default-scorer", |b| {
        b.iter(|| {
            scored
                .select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    let mut costs = vec![0.0f64; rows.len()];
    c.bench_function("floor-four-fields", |b| {
        b.iter(|| {
            for (cost, row) in costs.iter_mut().zip(black_box(&rows)) {
                *cost = (row.active_prefill_tokens + row.effective_tokens) as f64 * 0.0625
                    - row.effective_blocks
                    + row.active_decode_blocks as f64;
            }
        });
    });
    c.bench_function("floor-min-chain", |b| {
        b.iter(|| {
            black_box(&costs)
                .iter()
                .fold(f64::INFINITY, |low, &x| if x < low { x } else { low })
        });
    });
    let mut weights = vec![0.0; costs.len()];
    c.bench_function("floor-exp", |b| {
        b.iter(|| {
            for (w, &c) in weights.iter_mut().zip(black_box(&costs)) {
                // The sampler's argument for costs scaled to [0, 1] at T = 0.7.
                *w = (c * -1e-3 / 0.7).exp();
            }
            black_box(&weights);
        });
    });
    let mut columns = vec![0.0; 3 * costs.len()];
    c.bench_function("floor-three-divisions", |b| {
        b.iter(|| {
            let divisors = black_box([128.0, 4096.0, 37.0]);
            for (column, d) in columns.chunks_exact_mut(costs.len()).zip(divisors) {
                for (x, &c) in column.iter_mut().zip(black_box(&costs)) {
                    *x = c / d;
                }
            }
            black_box(&columns);
        });
    });
    let full = Policy::new((), (DefaultCost::default(),), DefaultPicker::default()).unwrap();
    c.bench_function("full", |b| {
        b.iter(|| {
            full.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
}

criterion_group!(benches, breakdown);
criterion_main!(benches);
