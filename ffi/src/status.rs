//! Status codes, the thread-local detail message, and the one panic boundary every export uses.

use std::cell::RefCell;
use std::fmt::Display;

use libroute_core::{ConfigError, FleetError, IngestError, LedgerError, SelectError};

use crate::components::UNDEFINED_VERDICT;

/// The result of every libroute call. `LIBROUTE_STATUS_OK` is 0, so `if (rc != 0)` tests for
/// failure. Values are grouped in ranges and never reused: a retired value stays reserved.
///
/// - 0: success.
/// - 100-199: the arguments of the call (NULL pointers, enum values, buffer and capacity sizes).
/// - 200-299: policy configuration.
/// - 300-399: the selection itself.
/// - 400-499: the load ledger.
/// - 900: a panic inside libroute (a bug), caught at the boundary.
///
/// `libroute_status_message` gives each code's text; `libroute_last_error` gives the detail of the
/// last failure on the calling thread (which knob, which row).
#[allow(
    non_camel_case_types,
    reason = "C naming: this is the header's type name"
)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 100,
    /// An argument is out of range: an enum value, a boolean other than 0 or 1, a zero capacity.
    InvalidArgument = 101,
    /// An output buffer is too small; nothing was written.
    BufferTooSmall = 102,
    /// More rows than the selector's capacity, or a capacity above the largest supported.
    CapacityExceeded = 103,
    /// The configuration text is not valid JSON (or not UTF-8), or a value has the wrong type.
    InvalidJson = 200,
    /// The configuration names a key no knob has.
    UnknownKey = 201,
    /// A knob's value is out of range, or two knobs conflict.
    InvalidKnob = 202,
    /// More components than a policy can hold.
    TooManyComponents = 203,
    /// No rows, or no eligible row (required taints).
    NoEndpoints = 300,
    /// Filters removed every eligible row.
    AllFiltered = 301,
    /// Every eligible row was removed as overloaded.
    AllOverloaded = 302,
    /// The request is invalid (block size 0, a non-finite preferred-taint weight, bad shared-hit
    /// ranges, a taint index of 64 or more).
    InvalidRequest = 303,
    /// A row is invalid (undefined flag bits, a NaN, infinite or negative estimate).
    InvalidRow = 304,
    /// Two rows name the same worker and rank (checked in seeded mode), or the worker is in the
    /// router's fleet already.
    DuplicateWorker = 305,
    /// The pinned worker is not among the rows.
    PinNotAllowed = 306,
    /// The pinned worker is overloaded.
    PinOverloaded = 307,
    /// The pinned worker is ineligible.
    PinIneligible = 308,
    /// A scorer (builtin or callback) gave a row a NaN, infinite or unwritten cost.
    NonFiniteCost = 309,
    /// A row's summed cost overflowed.
    NonFiniteTotal = 310,
    /// The picker returned a position outside the candidates.
    PickOutOfRange = 311,
    /// A filter callback reported an error or an undefined verdict.
    FilterFailed = 312,
    /// A scorer callback reported an error.
    ScorerFailed = 313,
    /// The picker reported an error.
    PickerFailed = 314,
    /// The request id is already booked.
    DuplicateRequest = 400,
    /// No booked request has this id (never booked, already freed, or, for a prefill
    /// completion, already completed).
    UnknownRequest = 401,
    /// The worker is not registered with the ledger (or, for the router's fleet, not in it).
    UnknownWorker = 402,
    /// libroute panicked (a bug); the call had no effect that the caller can observe.
    Panic = 900,
}

impl libroute_status {
    /// Every status, for the message table and its tests.
    pub const ALL: [libroute_status; 28] = [
        Self::Ok,
        Self::NullArgument,
        Self::InvalidArgument,
        Self::BufferTooSmall,
        Self::CapacityExceeded,
        Self::InvalidJson,
        Self::UnknownKey,
        Self::InvalidKnob,
        Self::TooManyComponents,
        Self::NoEndpoints,
        Self::AllFiltered,
        Self::AllOverloaded,
        Self::InvalidRequest,
        Self::InvalidRow,
        Self::DuplicateWorker,
        Self::PinNotAllowed,
        Self::PinOverloaded,
        Self::PinIneligible,
        Self::NonFiniteCost,
        Self::NonFiniteTotal,
        Self::PickOutOfRange,
        Self::FilterFailed,
        Self::ScorerFailed,
        Self::PickerFailed,
        Self::DuplicateRequest,
        Self::UnknownRequest,
        Self::UnknownWorker,
        Self::Panic,
    ];

    /// The status with this value; an unknown value maps to `InvalidArgument`.
    #[must_use]
    pub fn from_u32(value: u32) -> Self {
        Self::ALL
            .into_iter()
            .find(|s| *s as u32 == value)
            .unwrap_or(Self::InvalidArgument)
    }

    /// The fixed text of this status.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::NullArgument => "a required pointer argument was NULL",
            Self::InvalidArgument => "an argument is out of range",
            Self::BufferTooSmall => "the output buffer is too small",
            Self::CapacityExceeded => "more rows than the selector's capacity",
            Self::InvalidJson => "the configuration is not valid JSON of the expected shape",
            Self::UnknownKey => "the configuration has an unknown key",
            Self::InvalidKnob => "a configuration value is out of range",
            Self::TooManyComponents => "too many components for one policy",
            Self::NoEndpoints => "no endpoints: no eligible worker among the rows",
            Self::AllFiltered => "all eligible workers filtered",
            Self::AllOverloaded => "all eligible workers overloaded",
            Self::InvalidRequest => "the request is invalid",
            Self::InvalidRow => "a row is invalid",
            Self::DuplicateWorker => {
                "two rows name the same worker and rank, or the worker is in the fleet already"
            }
            Self::PinNotAllowed => "the pinned worker is not among the rows",
            Self::PinOverloaded => "the pinned worker is overloaded",
            Self::PinIneligible => "the pinned worker is not eligible",
            Self::NonFiniteCost => "a scorer gave a row a non-finite or unwritten cost",
            Self::NonFiniteTotal => "a row's total cost overflowed",
            Self::PickOutOfRange => "the picker returned a position outside the candidates",
            Self::FilterFailed => "a filter failed",
            Self::ScorerFailed => "a scorer failed",
            Self::PickerFailed => "the picker failed",
            Self::DuplicateRequest => "the request id is already booked",
            Self::UnknownRequest => "no booked request has this id",
            Self::UnknownWorker => {
                "the worker is not registered with the ledger, or not in the fleet"
            }
            Self::Panic => "libroute panicked (a bug): the call had no effect",
        }
    }
}

impl From<&SelectError> for libroute_status {
    fn from(e: &SelectError) -> Self {
        match e {
            SelectError::NoEndpoints => Self::NoEndpoints,
            SelectError::AllFiltered => Self::AllFiltered,
            SelectError::AllOverloaded => Self::AllOverloaded,
            SelectError::CapacityExceeded { .. } => Self::CapacityExceeded,
            SelectError::InvalidRequest(_) => Self::InvalidRequest,
            SelectError::InvalidRow { .. } => Self::InvalidRow,
            SelectError::DuplicateWorker { .. } => Self::DuplicateWorker,
            SelectError::PinNotAllowed(_) => Self::PinNotAllowed,
            SelectError::PinOverloaded(_) => Self::PinOverloaded,
            SelectError::PinIneligible(_) => Self::PinIneligible,
            SelectError::NonFiniteCost { .. } => Self::NonFiniteCost,
            SelectError::NonFiniteTotal { .. } => Self::NonFiniteTotal,
            SelectError::PickOutOfRange { .. } => Self::PickOutOfRange,
            SelectError::FilterFailed { .. } => Self::FilterFailed,
            SelectError::ScorerFailed { .. } => Self::ScorerFailed,
            SelectError::ExplanationBufferTooSmall { .. } => Self::BufferTooSmall,
            SelectError::PickerFailed(_) | _ => Self::PickerFailed,
        }
    }
}

impl From<&ConfigError> for libroute_status {
    fn from(_: &ConfigError) -> Self {
        Self::InvalidKnob
    }
}

/// Why a call failed: its status and one sentence naming the row, field, knob or worker at fault.
///
/// The safe layer (`crate::host`) returns it; the C ABI records its sentence as the calling
/// thread's detail (`libroute_last_error`) and returns its status; the object facade turns it into
/// an error value. The common failures of a busy server (a selection's, the ledger's) carry the
/// core's error itself and allocate nothing; the sentence is written when it is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    status: libroute_status,
    detail: Detail,
}

#[derive(Debug, Clone, PartialEq)]
enum Detail {
    Fixed(&'static str),
    /// "`name` is NULL".
    Null(&'static str),
    Text(String),
    Select(SelectError),
    Ledger(LedgerError),
    Ingest(IngestError),
}

impl Failure {
    /// A failure whose sentence is `detail`.
    pub(crate) fn new(status: libroute_status, detail: impl Display) -> Self {
        Failure {
            status,
            detail: Detail::Text(detail.to_string()),
        }
    }

    /// A failure with a fixed sentence.
    pub(crate) const fn fixed(status: libroute_status, detail: &'static str) -> Self {
        Failure {
            status,
            detail: Detail::Fixed(detail),
        }
    }

    /// `NULL_ARGUMENT`: "`name` is NULL".
    pub(crate) const fn null(name: &'static str) -> Self {
        Failure {
            status: libroute_status::NullArgument,
            detail: Detail::Null(name),
        }
    }

    /// A selection's failure.
    pub(crate) fn select(e: SelectError) -> Self {
        match e {
            SelectError::FilterFailed { filter, error } if error.code == UNDEFINED_VERDICT => {
                return Failure::new(
                    libroute_status::FilterFailed,
                    format_args!("filter {filter} wrote a verdict that is not a libroute_verdict"),
                );
            }
            _ => {}
        }
        Failure {
            status: libroute_status::from(&e),
            detail: Detail::Select(e),
        }
    }

    /// The ledger's refusal.
    pub(crate) fn ledger(e: LedgerError) -> Self {
        let status = match e {
            LedgerError::DuplicateId(_) => libroute_status::DuplicateRequest,
            LedgerError::UnknownId(_) | LedgerError::PrefillAlreadyComplete(_) => {
                libroute_status::UnknownRequest
            }
            LedgerError::UnknownWorker(_) => libroute_status::UnknownWorker,
            LedgerError::InvalidTime => libroute_status::InvalidArgument,
            _ => libroute_status::CapacityExceeded,
        };
        Failure {
            status,
            detail: Detail::Ledger(e),
        }
    }

    /// The router's fleet's refusal: `CAPACITY_EXCEEDED` (full), `DUPLICATE_WORKER`,
    /// `UNKNOWN_WORKER` (not in the fleet).
    pub(crate) fn fleet(e: FleetError) -> Self {
        let status = match e {
            FleetError::Full { .. } => libroute_status::CapacityExceeded,
            FleetError::Duplicate(_) => libroute_status::DuplicateWorker,
            FleetError::UnknownWorker(_) => libroute_status::UnknownWorker,
            _ => libroute_status::InvalidArgument,
        };
        Failure::new(status, e)
    }

    /// An engine KV batch's failure: `CAPACITY_EXCEEDED` when the index has no bit left for a
    /// new worker, else `INVALID_ARGUMENT` (the payload, naming the byte offset).
    pub(crate) fn ingest(e: IngestError) -> Self {
        let status = match e {
            IngestError::Index(_) => libroute_status::CapacityExceeded,
            _ => libroute_status::InvalidArgument,
        };
        Failure {
            status,
            detail: Detail::Ingest(e),
        }
    }

    /// The status: which kind of failure, as `libroute.h` numbers it.
    #[must_use]
    pub fn status(&self) -> libroute_status {
        self.status
    }
}

/// The one sentence of the failure (what `libroute_last_error` gives).
impl Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Detail::Fixed(text) => f.write_str(text),
            Detail::Null(name) => write!(f, "{name} is NULL"),
            Detail::Text(text) => f.write_str(text),
            Detail::Select(e) => e.fmt(f),
            Detail::Ledger(e) => e.fmt(f),
            Detail::Ingest(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failure {}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `failure`'s sentence as this thread's last error message (reusing the buffer, so a
/// warm failure allocates nothing) and returns its status.
fn record(failure: &Failure) -> libroute_status {
    use std::fmt::Write as _;
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        e.clear();
        let _ = write!(e, "{failure}");
    });
    failure.status
}

/// Runs `f` with this thread's last error message.
pub(crate) fn with_last_error<R>(f: impl FnOnce(&str) -> R) -> R {
    LAST_ERROR.with(|e| f(&e.borrow()))
}

/// The boundary of every export that can fail: runs `body` inside [`guard`], and records a
/// failure's sentence for `libroute_last_error`.
pub(crate) fn boundary(body: impl FnOnce() -> Result<(), Failure>) -> libroute_status {
    guard(|| match body() {
        Ok(()) => libroute_status::Ok,
        Err(failure) => record(&failure),
    })
}

/// The one panic boundary: runs `body`, and turns a panic into `LIBROUTE_STATUS_PANIC` with the
/// panic's message as the detail, so a routing bug becomes a status code instead of aborting the
/// Go, JVM or C++ host. (Rust aborts on a panic that would unwind across `extern "C"`.)
pub(crate) fn guard(body: impl FnOnce() -> libroute_status) -> libroute_status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(status) => status,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            record(&Failure::new(
                libroute_status::Panic,
                format_args!("libroute panicked: {what}"),
            ))
        }
    }
}
