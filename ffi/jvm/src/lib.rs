//! The JVM's libroute library, `libroute_jvm.so`: the uniffi facade (`libroute-uniffi`, linked
//! in whole: the Kotlin bindings' JNA calls land there) and the JVM fast path,
//! `dev.libroute.DirectSelector`'s native methods, called through JNI (as zstd-jni and lz4-java
//! reach native code) instead of uniffi's JNA calls, which cost several microseconds each. One
//! shared object serves both, so the objects the fast path receives are the facade's own.
//!
//! The Kotlin side holds one strong reference to a [`Policy`] and a [`Selector`] (uniffi's
//! handles: `Arc` pointers it cloned), encodes the request into a direct `ByteBuffer` it owns,
//! and passes the rows as a direct `ByteBuffer` in the C row layout. This side reads both where
//! they lie, selects through [`Selector::select_raw`] (the safe layer, as every binding does) and
//! writes the outcome into a third direct buffer. A failure throws the uniffi exception class of
//! its variant (`RouteException$NoEndpoints`, ...) with the same sentence, so the fast path
//! fails exactly as `Selector.select` does. Nothing unwinds into the JVM.
//!
//! Buffer layouts (little-endian, 8-byte aligned; `DirectSelector.kt` writes and reads them):
//!
//! `DirectSelector` passes every buffer by address and capacity: its own two buffers' addresses
//! are taken once (`address0`), and the caller's rows buffer's whenever it is another object
//! than the last one's, so a select in a loop over the same buffer calls nothing in the JVM.
//!
//! - request, `RequestHeader` then `preferred_taints_len` × `libroute_preferred_taint` (16
//!   bytes: `taint` u32, 4 padding, `weight` f64) then `shared_hits_len` × `libroute_block_range`;
//! - outcome, `Outcome`.

// Why: JNI is raw pointers from the JVM; each use carries a SAFETY comment.
#![allow(unsafe_code, reason = "the JNI boundary")]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;
use std::mem::{align_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use jni_sys::{JNI_FALSE, JNI_TRUE, JNIEnv, jboolean, jclass, jdouble, jint, jlong, jobject};
use route::{
    LIBROUTE_MAX_SCORERS, RequestArgs, libroute_block_range, libroute_preferred_taint,
    libroute_request, libroute_row, libroute_selection, libroute_worker,
};

use route_uniffi::{Policy, RouteError, RouteTime, Router, Selector};

/// The fixed part of an encoded request.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RequestHeader {
    prompt_tokens: u64,
    block_size: u32,
    /// `Role`'s ordinal, which is `libroute_role`'s value.
    role: u32,
    /// `REQUEST_*` bits.
    flags: u32,
    pin_dp_rank: u32,
    pin_worker_id: u64,
    required_taints: u64,
    session: u64,
    preferred_taints_len: u32,
    shared_hits_len: u32,
}

const REQUEST_TRACK_PREFILL: u32 = 1;
const REQUEST_CONDITIONAL_DISAGG: u32 = 2;
const REQUEST_HAS_TIER_MATCHES: u32 = 4;
const REQUEST_HAS_PIN: u32 = 8;
const REQUEST_HAS_SHARED_HITS: u32 = 16;
const REQUEST_HAS_SESSION: u32 = 32;

/// A selection's outcome, as `DirectSelector` reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Outcome {
    row: u64,
    worker_id: u64,
    dp_rank: u32,
    /// `libroute_reason`: 0 pinned, 1 minimum cost, 2 sampled, 3 custom.
    reason: u32,
    ties: u32,
    /// How many of `contributions` are set.
    scorers: u32,
    cost: f64,
    probability: f64,
    candidates: u64,
    request_blocks: u64,
    cached_tokens: u64,
    contributions: [f64; LIBROUTE_MAX_SCORERS],
}

// The Kotlin side's constants (`DirectSelector.kt`); a change here must change them.
const _: () = assert!(size_of::<RequestHeader>() == 56);
const _: () = assert!(size_of::<Outcome>() == 72 + 8 * LIBROUTE_MAX_SCORERS);
const _: () = assert!(size_of::<libroute_row>() == 104);
const _: () = assert!(size_of::<libroute_preferred_taint>() == 16);
const _: () = assert!(size_of::<libroute_block_range>() == 16);

/// A uniffi handle, an `Arc::into_raw` pointer that Kotlin carries as a `Long`, as the pointer.
fn pointer<T>(handle: jlong) -> *const T {
    let bits = u64::from_ne_bytes(handle.to_ne_bytes());
    usize::try_from(bits).map_or(std::ptr::null(), std::ptr::with_exposed_provenance)
}

/// Why a call failed: a libroute error, or a misuse of the buffers (a bug in the caller).
enum Failure {
    Route(RouteError),
    Argument(String),
}

impl From<RouteError> for Failure {
    fn from(e: RouteError) -> Self {
        Failure::Route(e)
    }
}

/// The address of a direct buffer's memory. Sizes and alignment are checked where the address
/// is used ([`owned`]), against the capacity the caller passes with it.
///
/// # Safety
///
/// `env` must be the calling thread's JNI environment and `buffer` a local reference.
unsafe fn buffer_address(env: *mut JNIEnv, buffer: jobject) -> Result<*mut u8, String> {
    if buffer.is_null() {
        return Err("buffer is null".to_owned());
    }
    // SAFETY: a valid environment by contract; the function exists since JNI 1.4.
    let address = unsafe { (**env).GetDirectBufferAddress.map(|f| f(env, buffer)) };
    match address {
        None => Err("this JVM has no direct buffer access".to_owned()),
        Some(address) if address.is_null() => Err("buffer is not a direct ByteBuffer".to_owned()),
        Some(address) => Ok(address.cast::<u8>()),
    }
}

/// The memory of one of `DirectSelector`'s own buffers, by the address [`address0`] gave it:
/// checked for NULL, size and alignment.
fn owned<T>(
    address: jlong,
    capacity: jint,
    what: &str,
    offset: usize,
    bytes: usize,
) -> Result<*mut T, Failure> {
    let start = pointer::<u8>(address).cast_mut();
    let capacity = usize::try_from(capacity).unwrap_or(0);
    if start.is_null() || offset.checked_add(bytes).is_none_or(|end| end > capacity) {
        return Err(Failure::Argument(format!(
            "{what} holds {capacity} bytes, not {bytes} from byte {offset}"
        )));
    }
    let start = start.wrapping_add(offset);
    if start.align_offset(align_of::<T>()) != 0 {
        return Err(Failure::Argument(format!(
            "{what} at byte {offset} is not {}-byte aligned",
            align_of::<T>()
        )));
    }
    Ok(start.cast::<T>())
}

/// The object behind a uniffi handle, which the caller keeps alive.
///
/// # Safety
///
/// `handle` must be 0 or an `Arc::into_raw` pointer to a live `T` (uniffi's handle).
unsafe fn object<'a, T>(handle: jlong, what: &str) -> Result<&'a T, Failure> {
    let p = pointer::<T>(handle);
    if p.is_null() {
        return Err(Failure::Argument(format!("the {what} handle is 0")));
    }
    // SAFETY: non-null, and live by contract.
    Ok(unsafe { &*p })
}

/// The rows of a direct buffer, by the address [`address0`] gave for it and its capacity:
/// `count` rows from byte `offset`, in place.
///
/// # Safety
///
/// `rows` must be the address and capacity of a direct buffer the caller keeps alive, whose rows
/// nothing else touches during the call.
unsafe fn rows_at<'a>(rows: Rows) -> Result<&'a mut [libroute_row], Failure> {
    let (address, capacity, offset, count) = rows;
    let (Ok(at), Ok(n)) = (usize::try_from(offset), usize::try_from(count)) else {
        return Err(Failure::Argument(format!(
            "rows offset {offset} or count {count} is negative"
        )));
    };
    let start = owned::<libroute_row>(
        address,
        capacity,
        "rows",
        at,
        n.saturating_mul(size_of::<libroute_row>()),
    )?;
    // SAFETY: checked to hold `n` aligned rows; every bit pattern is a valid row; the buffer
    // is alive and untouched for the call (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(start, n) })
}

/// A rows buffer as `DirectSelector` passes it: address, capacity, byte offset, row count.
type Rows = (jlong, jint, jint, jint);

/// The encoded request in `DirectSelector`'s buffer, and the `hashes` block hashes after its
/// arrays.
///
/// # Safety
///
/// `request` must be the address and capacity of a live direct buffer that nothing writes
/// while the returned values are used.
unsafe fn request_at<'a>(
    request: (jlong, jint),
    hashes: usize,
) -> Result<(libroute_request, &'a [u64]), Failure> {
    let header_at = owned::<RequestHeader>(
        request.0,
        request.1,
        "request",
        0,
        size_of::<RequestHeader>(),
    )?;
    // SAFETY: checked to hold one aligned header, in a buffer the caller keeps alive.
    let header = unsafe { header_at.read() };
    let taints = header.preferred_taints_len as usize;
    let hits = header.shared_hits_len as usize;
    let arrays_bytes = (taints + hits) * 16;
    // The arrays, then the hashes, follow the header.
    let arrays = owned::<libroute_preferred_taint>(
        request.0,
        request.1,
        "request",
        size_of::<RequestHeader>(),
        arrays_bytes + hashes * 8,
    )?;
    // SAFETY: within the bytes checked above; aligned (16-byte entries after a 56-byte header
    // in an 8-aligned buffer); the buffer outlives the call that reads them.
    let (shared_hits, hash_values) = unsafe {
        let hits_at = arrays.add(taints).cast::<libroute_block_range>();
        let hashes_at = hits_at.add(hits).cast::<u64>();
        (
            hits_at.cast_const(),
            std::slice::from_raw_parts(hashes_at.cast_const(), hashes),
        )
    };
    let flag = |bit: u32| u8::from(header.flags & bit != 0);
    let c_request = libroute_request {
        prompt_tokens: header.prompt_tokens,
        block_size: header.block_size,
        role: header.role,
        track_prefill_tokens: flag(REQUEST_TRACK_PREFILL),
        conditional_disagg: flag(REQUEST_CONDITIONAL_DISAGG),
        has_tier_matches: flag(REQUEST_HAS_TIER_MATCHES),
        has_pin: flag(REQUEST_HAS_PIN),
        has_shared_hits: flag(REQUEST_HAS_SHARED_HITS),
        pin: libroute_worker {
            worker_id: header.pin_worker_id,
            dp_rank: header.pin_dp_rank,
        },
        required_taints: header.required_taints,
        preferred_taints: arrays.cast_const(),
        preferred_taints_len: taints,
        shared_hits,
        shared_hits_len: hits,
        has_session: flag(REQUEST_HAS_SESSION),
        session: header.session,
    };
    Ok((c_request, hash_values))
}

/// Writes a selection's outcome into `DirectSelector`'s outcome buffer.
///
/// # Safety
///
/// `out` must be the address and capacity of a live direct buffer nothing else touches.
unsafe fn write_outcome(
    out: (jlong, jint),
    s: &libroute_selection,
    contributions: [f64; LIBROUTE_MAX_SCORERS],
) -> Result<(), Failure> {
    let at = owned::<Outcome>(out.0, out.1, "out", 0, size_of::<Outcome>())?;
    let outcome = Outcome {
        row: s.row as u64,
        worker_id: s.worker.worker_id,
        dp_rank: s.worker.dp_rank,
        reason: s.reason,
        ties: s.ties,
        scorers: u32::try_from(s.scorers.min(LIBROUTE_MAX_SCORERS)).unwrap_or(0),
        cost: s.cost,
        probability: s.probability,
        candidates: s.candidates as u64,
        request_blocks: s.request_blocks,
        cached_tokens: s.cached_tokens,
        contributions,
    };
    // SAFETY: checked to hold one aligned `Outcome`, in a buffer the caller keeps alive.
    unsafe { at.write(outcome) };
    Ok(())
}

/// Selects once; see the module documentation for the arguments' layouts.
///
/// # Safety
///
/// `policy` and `selector` are strong references from uniffi's handles that the caller keeps
/// alive; `rows` is a local reference of this call; `request` and `out` are the addresses and
/// capacities of direct buffers the caller keeps alive and does not touch during the call.
#[allow(clippy::too_many_arguments, reason = "the JNI method's arguments")]
unsafe fn select(
    policy: jlong,
    selector: jlong,
    request: (jlong, jint),
    rows: Rows,
    out: (jlong, jint),
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let (policy, selector, rows) = unsafe {
        (
            object::<Policy>(policy, "policy")?,
            object::<Selector>(selector, "selector")?,
            rows_at(rows)?,
        )
    };
    // SAFETY: the caller's contract.
    let (c_request, _) = unsafe { request_at(request, 0)? };
    // SAFETY: the request's arrays point into the request buffer, checked to hold them.
    let args = unsafe { RequestArgs::from_c(&c_request) };
    let mut contributions = [0.0; LIBROUTE_MAX_SCORERS];
    let s = selector.select_raw(policy, &args, rows, &mut contributions)?;
    // SAFETY: the caller's contract.
    unsafe { write_outcome(out, &s, contributions) }
}

/// Routes once: looks the hashes up, projects the load onto the rows (in place), selects and
/// books request `id`.
///
/// # Safety
///
/// As [`select`], and `router` likewise.
#[allow(clippy::too_many_arguments, reason = "the JNI method's arguments")]
unsafe fn route(
    handles: (jlong, jlong, jlong),
    request: (jlong, jint),
    hashes: jint,
    rows: Rows,
    id: jlong,
    now: RouteTime,
    out: (jlong, jint),
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let (router, policy, selector, rows) = unsafe {
        (
            object::<Router>(handles.0, "router")?,
            object::<Policy>(handles.1, "policy")?,
            object::<Selector>(handles.2, "selector")?,
            rows_at(rows)?,
        )
    };
    let Ok(hashes) = usize::try_from(hashes) else {
        return Err(Failure::Argument(format!("{hashes} hashes is negative")));
    };
    // SAFETY: the caller's contract.
    let (c_request, hashes) = unsafe { request_at(request, hashes)? };
    // SAFETY: the request's arrays point into the request buffer, checked to hold them.
    let args = unsafe { RequestArgs::from_c(&c_request) };
    let id = u64::from_ne_bytes(id.to_ne_bytes());
    let mut s = router.route_raw(policy, selector, &args, hashes, rows, id, now)?;
    // A route reports no contributions, as `Router.route` (its selector's `last_costs` has the
    // costs).
    s.scorers = 0;
    // SAFETY: the caller's contract.
    unsafe { write_outcome(out, &s, [0.0; LIBROUTE_MAX_SCORERS]) }
}

/// Throws `class` (a JNI class name) with `message`.
///
/// # Safety
///
/// `env` must be the calling thread's JNI environment, with no exception pending.
unsafe fn throw(env: *mut JNIEnv, class: &str, message: &str) {
    let (Ok(class), Ok(message)) = (
        CString::new(class),
        CString::new(message.replace('\0', " ")),
    ) else {
        return;
    };
    // SAFETY: a valid environment by contract; FindClass and ThrowNew exist since JNI 1.1. When
    // FindClass fails it leaves its own exception pending, which the JVM then raises.
    unsafe {
        let functions = &**env;
        let (Some(find_class), Some(throw_new)) = (functions.FindClass, functions.ThrowNew) else {
            return;
        };
        let cls: jclass = find_class(env, class.as_ptr());
        if !cls.is_null() {
            throw_new(env, cls, message.as_ptr());
        }
    }
}

/// Turns a call's result into the JNI return value, throwing the failure's exception.
///
/// # Safety
///
/// `env` must be the calling thread's JNI environment, with no exception pending.
unsafe fn finish(
    env: *mut JNIEnv,
    result: std::thread::Result<Result<(), Failure>>,
    call: &str,
) -> jboolean {
    let failure = match result {
        Ok(Ok(())) => return JNI_TRUE,
        Ok(Err(failure)) => failure,
        Err(_) => Failure::Route(RouteError::Panic {
            detail: format!("libroute panicked in DirectSelector.{call} (a bug); nothing was done"),
        }),
    };
    // SAFETY: the caller's contract.
    unsafe {
        match failure {
            Failure::Route(e) => throw(
                env,
                &format!("dev/libroute/RouteException${}", e.name()),
                e.message(),
            ),
            Failure::Argument(message) => {
                throw(env, "java/lang/IllegalArgumentException", &message);
            }
        }
    }
    JNI_FALSE
}

/// `DirectSelector.select0`: selects, writing the outcome to `out`; on failure throws the
/// `RouteException` of its variant (or `IllegalArgumentException` for a misused buffer) and
/// returns false.
///
/// # Safety
///
/// Called by the JVM for `dev.libroute.DirectLib.select0`, with the handles and buffers
/// `DirectSelector` keeps.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "the JNI method's arguments")]
pub(crate) unsafe extern "system" fn Java_dev_libroute_DirectLib_select0(
    env: *mut JNIEnv,
    _class: jclass,
    policy: jlong,
    selector: jlong,
    request: jlong,
    request_capacity: jint,
    rows: jlong,
    rows_capacity: jint,
    rows_offset: jint,
    rows_count: jint,
    out: jlong,
    out_capacity: jint,
) -> jboolean {
    // SAFETY: the JVM's contract for a native method and `DirectSelector`'s (see `select`).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe {
        select(
            policy,
            selector,
            (request, request_capacity),
            (rows, rows_capacity, rows_offset, rows_count),
            (out, out_capacity),
        )
    }));
    // SAFETY: the JVM's environment for this call.
    unsafe { finish(env, result, "select") }
}

/// `DirectSelector.route0`: routes (`timed`: `now_ms`, else `now` in units), writing the outcome
/// to `out` and the cache and load the router found into the rows; on failure throws as
/// `select0` does and returns false.
///
/// # Safety
///
/// Called by the JVM for `dev.libroute.DirectLib.route0`, with the handles and buffers
/// `DirectSelector` keeps.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "the JNI method's arguments")]
pub(crate) unsafe extern "system" fn Java_dev_libroute_DirectLib_route0(
    env: *mut JNIEnv,
    _class: jclass,
    router: jlong,
    policy: jlong,
    selector: jlong,
    request: jlong,
    request_capacity: jint,
    hashes: jint,
    rows: jlong,
    rows_capacity: jint,
    rows_offset: jint,
    rows_count: jint,
    id: jlong,
    timed: jboolean,
    now: jlong,
    now_ms: jdouble,
    out: jlong,
    out_capacity: jint,
) -> jboolean {
    let now = if timed == JNI_FALSE {
        RouteTime::Units(u64::from_ne_bytes(now.to_ne_bytes()))
    } else {
        RouteTime::Ms(now_ms)
    };
    // SAFETY: the JVM's contract for a native method and `DirectSelector`'s (see `route`).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe {
        route(
            (router, policy, selector),
            (request, request_capacity),
            hashes,
            (rows, rows_capacity, rows_offset, rows_count),
            id,
            now,
            (out, out_capacity),
        )
    }));
    // SAFETY: the JVM's environment for this call.
    unsafe { finish(env, result, "route") }
}

/// `DirectLib.address0`: the address of a direct buffer's memory, which `DirectSelector` takes
/// once for each buffer it owns (so a select asks the JVM only about the rows' buffer); 0 with
/// an `IllegalArgumentException` pending when `buffer` is not direct.
///
/// # Safety
///
/// Called by the JVM for `dev.libroute.DirectLib.address0`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "system" fn Java_dev_libroute_DirectLib_address0(
    env: *mut JNIEnv,
    _class: jclass,
    buffer: jobject,
) -> jlong {
    // SAFETY: the JVM's environment and a local reference of this call.
    match unsafe { buffer_address(env, buffer) } {
        Ok(address) => i64::from_ne_bytes((address as usize as u64).to_ne_bytes()),
        Err(message) => {
            // SAFETY: as above; no exception is pending.
            unsafe { throw(env, "java/lang/IllegalArgumentException", &message) };
            0
        }
    }
}

/// `DirectLib.release0`: gives back the strong references `DirectSelector` cloned.
///
/// # Safety
///
/// Each handle is 0 or a uniffi handle of its type that the caller owns and never uses again.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "system" fn Java_dev_libroute_DirectLib_release0(
    _env: *mut JNIEnv,
    _class: jclass,
    policy: jlong,
    selector: jlong,
    router: jlong,
) {
    let _ = catch_unwind(|| {
        if router != 0 {
            // SAFETY: an `Arc::into_raw` pointer the caller owns (uniffi's clone), given back once.
            drop(unsafe { Arc::from_raw(pointer::<Router>(router)) });
        }
        if policy != 0 {
            // SAFETY: an `Arc::into_raw` pointer the caller owns (uniffi's clone), given back once.
            drop(unsafe { Arc::from_raw(pointer::<Policy>(policy)) });
        }
        if selector != 0 {
            // SAFETY: as for the policy.
            drop(unsafe { Arc::from_raw(pointer::<Selector>(selector)) });
        }
    });
}
