//! Status codes, the thread-local detail message, and the one panic boundary every export uses.

use std::cell::RefCell;
use std::fmt::Display;

use libroute_core::{ConfigError, SelectError};

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
    /// Two rows name the same worker and rank (checked in seeded mode).
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
    /// The worker is not registered with the ledger.
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
            Self::DuplicateWorker => "two rows name the same worker and rank",
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
            Self::UnknownWorker => "the worker is not registered with the ledger",
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

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `detail` as this thread's last error message and returns `status`.
pub(crate) fn fail(status: libroute_status, detail: impl Display) -> libroute_status {
    use std::fmt::Write as _;
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        e.clear();
        let _ = write!(e, "{detail}");
    });
    status
}

/// Runs `f` with this thread's last error message.
pub(crate) fn with_last_error<R>(f: impl FnOnce(&str) -> R) -> R {
    LAST_ERROR.with(|e| f(&e.borrow()))
}

/// The one panic boundary: runs `body`, and turns a panic into `LIBROUTE_STATUS_PANIC` with the
/// panic's message as the detail, so a routing bug becomes a status code instead of aborting the
/// Go, JVM or C++ host. (Rust aborts on a panic that would unwind across `extern "C"`.)
pub(crate) fn boundary(body: impl FnOnce() -> libroute_status) -> libroute_status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(status) => status,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            fail(
                libroute_status::Panic,
                format_args!("libroute panicked: {what}"),
            )
        }
    }
}
