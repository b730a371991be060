//! A scorer wrapper for the tests that compare the engine's one pass with its general steps.

use libroute_core::{Candidates, ComponentError, Leg, RequestView, Scorer, WorkerInputs};

/// A scorer scored through the general pipeline only: it forwards its inputs and costs but does
/// not offer the one pass (`Scorer::score_all_rows`), nor say its costs are per row.
pub(crate) struct General<S>(pub(crate) S);

impl<S: Scorer> Scorer for General<S> {
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
