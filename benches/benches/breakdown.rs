//! Where one selection's time goes, at 1,024 candidates. The general pipeline: alone
//! (validation, eligibility, overload), plus a trivial scorer, plus the default cost (wrapped so
//! it does not offer the one-pass capability). The one pass: the default cost with a trivial
//! picker. And the full default policy. For scale, the floor of any per-row formula over these
//! rows: reading four of each row's fields into one cost (`floor-four-fields`; the same four
//! fields from columns, as a structure of arrays would hold them: `floor-four-columns`; both with
//! the one-pass loop's conversion of counters: `-exact`) and the minimum of 1,024 costs in one
//! dependent chain (`floor-min-chain`); and at T > 0, the platform `exp` the
//! sampler must call once per row to match Dynamo bit for bit (`floor-exp`: 1,024 calls, the
//! weights written and nothing else); and the three divisions by a constant per row that
//! `llm_d`'s three scorers need (`floor-three-divisions`: over contiguous columns, so two rows per
//! instruction, nothing else). `cargo bench -p libroute-benches --bench breakdown`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_benches::bench_fleet;
use libroute_core::{
    Candidates, ComponentError, DefaultCost, DefaultPicker, Leg, Pick, PickInput, PickReason,
    Picker, Policy, RandomSource, Request, RequestView, Row, Scorer, Selector, WorkerInputs,
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
    let full = Policy::new((), (DefaultCost::default(),), DefaultPicker::default()).unwrap();
    c.bench_function("full", |b| {
        b.iter(|| {
            full.select(&mut s, black_box(&request), black_box(&rows))
                .unwrap()
        });
    });
    floors(c, &rows);
}

/// The floors of any per-row formula over `rows` (see the module's comment).
fn floors(c: &mut Criterion, rows: &[Row]) {
    let mut costs = vec![0.0f64; rows.len()];
    c.bench_function("floor-four-fields", |b| {
        b.iter(|| {
            for (cost, row) in costs.iter_mut().zip(black_box(rows)) {
                *cost = (row.active_prefill_tokens + row.effective_tokens) as f64 * 0.0625
                    - row.effective_blocks
                    + row.active_decode_blocks as f64;
            }
        });
    });
    // The same four fields held in columns, as a structure of arrays would hold them: what the
    // row layout costs the formula.
    let apt: Vec<u64> = rows.iter().map(|r| r.active_prefill_tokens).collect();
    let tokens: Vec<u64> = rows.iter().map(|r| r.effective_tokens).collect();
    let blocks: Vec<f64> = rows.iter().map(|r| r.effective_blocks).collect();
    let dcb: Vec<u64> = rows.iter().map(|r| r.active_decode_blocks).collect();
    c.bench_function("floor-four-columns", |b| {
        b.iter(|| {
            let (apt, tokens, blocks, dcb) = black_box((&apt, &tokens, &blocks, &dcb));
            let fields = apt.iter().zip(tokens).zip(blocks).zip(dcb);
            for (cost, (((&apt, &tokens), &blocks), &dcb)) in costs.iter_mut().zip(fields) {
                *cost = (apt + tokens) as f64 * 0.0625 - blocks + dcb as f64;
            }
        });
    });
    // Both again with the one-pass loop's conversion of counters instead of `as f64`.
    c.bench_function("floor-four-fields-exact", |b| {
        b.iter(|| {
            for (cost, row) in costs.iter_mut().zip(black_box(rows)) {
                *cost = exact(row.active_prefill_tokens + row.effective_tokens) * 0.0625
                    - row.effective_blocks
                    + exact(row.active_decode_blocks);
            }
        });
    });
    c.bench_function("floor-four-columns-exact", |b| {
        b.iter(|| {
            let (apt, tokens, blocks, dcb) = black_box((&apt, &tokens, &blocks, &dcb));
            let fields = apt.iter().zip(tokens).zip(blocks).zip(dcb);
            for (cost, (((&apt, &tokens), &blocks), &dcb)) in costs.iter_mut().zip(fields) {
                *cost = exact(apt + tokens) * 0.0625 - blocks + exact(dcb);
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
}

/// `x as f64` for `x < 2^52` as the one-pass loop converts counters: an OR and a subtraction,
/// which SSE2 packs two to an instruction (`as f64` of a `u64` is scalar there).
fn exact(x: u64) -> f64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    f64::from_bits(x | TWO_52.to_bits()) - TWO_52
}

criterion_group!(benches, breakdown);
criterion_main!(benches);
