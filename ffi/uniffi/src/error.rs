//! [`RouteError`]: one variant per C status, each with the safe layer's one-sentence detail.

use route::{Failure, libroute_status};

/// Defines [`RouteError`] with one variant per failure status, and its mapping from the status.
macro_rules! route_error {
    ($($(#[$doc:meta])* $variant:ident,)*) => {
        /// Why a libroute call failed: one variant per C status (`libroute_status`), each with the
        /// detail message that names the knob, row or worker at fault.
        #[derive(Debug, Clone, PartialEq, Eq, uniffi::Error)]
        pub enum RouteError {
            $($(#[$doc])* $variant {
                /// What exactly was wrong. (Not `message`: that name belongs to the foreign
                /// exception classes.)
                detail: String,
            },)*
            /// The object was released (`release()`); it cannot be used any more.
            Closed {
                /// Which object.
                detail: String,
            },
        }

        impl RouteError {
            /// The one mapping from the safe layer's failures: the status picks the variant, the
            /// failure's one sentence (naming the row, field, knob or worker) is the detail, the
            /// same sentence the C ABI's `libroute_last_error` gives.
            fn from_failure(failure: &Failure) -> Self {
                let detail = failure.to_string();
                match failure.status() {
                    $(libroute_status::$variant => Self::$variant { detail },)*
                    libroute_status::Ok => Self::Panic {
                        detail: "an error was reported for a successful call (a bug)".to_owned(),
                    },
                }
            }

            /// The detail message.
            #[must_use]
            pub fn message(&self) -> &str {
                match self {
                    $(Self::$variant { detail } => detail,)*
                    Self::Closed { detail } => detail,
                }
            }

            /// The variant's name (`"NoEndpoints"`), as the Python exception classes are named.
            #[must_use]
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant { .. } => stringify!($variant),)*
                    Self::Closed { .. } => "Closed",
                }
            }

            /// Every variant's name and `libroute_status` code, in declaration order; `Closed`,
            /// which has no code, is not among them.
            pub const STATUSES: &'static [(&'static str, u32)] =
                &[$((stringify!($variant), libroute_status::$variant as u32),)*];

            /// The `libroute_status` code of this error (as in `libroute.h`); `None` for
            /// [`RouteError::Closed`], which only this facade reports.
            #[must_use]
            pub fn code(&self) -> Option<u32> {
                match self {
                    $(Self::$variant { .. } => Some(libroute_status::$variant as u32),)*
                    Self::Closed { .. } => None,
                }
            }
        }
    };
}

route_error! {
    /// A required argument was missing.
    NullArgument,
    /// An argument is out of range (a zero capacity, a table size that is not a power of two).
    InvalidArgument,
    /// An output buffer is too small.
    BufferTooSmall,
    /// More rows than the selector's capacity, or a capacity above the largest supported.
    CapacityExceeded,
    /// The configuration is not valid JSON of the expected shape.
    InvalidJson,
    /// The configuration names a key no knob has.
    UnknownKey,
    /// A knob's value is out of range, or two knobs conflict.
    InvalidKnob,
    /// More components than a policy can hold.
    TooManyComponents,
    /// No rows, or no eligible row.
    NoEndpoints,
    /// Filters removed every eligible row.
    AllFiltered,
    /// Every eligible row was overloaded.
    AllOverloaded,
    /// The request is invalid.
    InvalidRequest,
    /// A row is invalid (a NaN, infinite or negative estimate).
    InvalidRow,
    /// Two rows name the same worker and rank, or the worker is in the router's fleet already.
    DuplicateWorker,
    /// The pinned worker is not among the rows.
    PinNotAllowed,
    /// The pinned worker is overloaded.
    PinOverloaded,
    /// The pinned worker is not eligible.
    PinIneligible,
    /// A scorer gave a row a non-finite cost.
    NonFiniteCost,
    /// A row's total cost overflowed.
    NonFiniteTotal,
    /// The picker returned a position outside the candidates.
    PickOutOfRange,
    /// A filter failed.
    FilterFailed,
    /// A scorer failed.
    ScorerFailed,
    /// The picker failed.
    PickerFailed,
    /// The request id is already booked.
    DuplicateRequest,
    /// No booked request has this id.
    UnknownRequest,
    /// The worker is not registered with the ledger (or, for the router's fleet, not in it).
    UnknownWorker,
    /// libroute panicked (a bug); the call had no effect.
    Panic,
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for RouteError {}

impl From<Failure> for RouteError {
    fn from(failure: Failure) -> Self {
        Self::from_failure(&failure)
    }
}

pub(crate) fn closed(what: &str) -> RouteError {
    RouteError::Closed {
        detail: format!("this {what} was released"),
    }
}
