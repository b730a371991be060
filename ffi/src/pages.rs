//! Memory for the router's tables: [`Pages`], a fixed-length slice that a table of 2 MiB or more
//! gets in transparent huge pages where the system offers them.
//!
//! The index's block table is large (2^18 slots of 544 bytes are 136 MiB at 1,024 workers) and a
//! route reads one slot per prompt block at random places in it, so on 4 KiB pages nearly every
//! read also misses the TLB and walks the page tables. In 2 MiB pages the same table needs 68 TLB
//! entries instead of 34,816. So a table of at least 2 MiB is allocated 2 MiB-aligned and, on
//! Linux, advised `MADV_HUGEPAGE` before its first write (Linux's default THP mode, `madvise`,
//! backs only advised memory with huge pages; `always` does not need the advice, `never` ignores
//! it). The advice is only advice: if the kernel declines, the table works the same on small
//! pages. Measured in `benches/RESULTS.md` ("The router's tables in huge pages").

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

/// A huge page on x86-64 and (with 4 KiB base pages) aarch64: tables at least this large are
/// aligned to it and advised into huge pages.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// `len` values of a plain-data `T` in one allocation of their own, aligned to [`HUGE_PAGE`] (and
/// advised into huge pages) when they take at least that much. Derefs to `[T]` through
/// `AsRef`/`AsMut`, the storage the core's tables take; freed on drop.
pub(crate) struct Pages<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// The allocation's layout, zero-sized when nothing was allocated.
    layout: Layout,
}

// SAFETY: `Pages` owns its values as a `Box<[T]>` does; sending or sharing it sends or shares
// them, so it is `Send` or `Sync` exactly when `T` is.
unsafe impl<T: Copy + Send> Send for Pages<T> {}
// SAFETY: as above; `&Pages` gives only `&[T]`.
unsafe impl<T: Copy + Sync> Sync for Pages<T> {}

impl<T: Copy> Pages<T> {
    /// `len` copies of `value`, or `None` when `len` values of `T` do not fit in memory (more
    /// than `isize::MAX` bytes, or the allocator refused them).
    #[must_use]
    pub(crate) fn filled(len: usize, value: T) -> Option<Self> {
        let bytes = len.checked_mul(size_of::<T>())?;
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE.max(align_of::<T>())
        } else {
            align_of::<T>()
        };
        let layout = Layout::from_size_align(bytes, align).ok()?;
        let ptr = if bytes == 0 {
            NonNull::dangling()
        } else {
            // SAFETY: the layout's size is not zero.
            let raw = unsafe { alloc::alloc(layout) };
            let ptr = NonNull::new(raw.cast::<T>())?;
            if align == HUGE_PAGE {
                advise_huge_pages(raw, bytes);
            }
            ptr
        };
        for i in 0..len {
            // SAFETY: `i < len`, within the allocation of `len` values (or, for a zero-sized
            // `T`, a write of nothing through a dangling, aligned pointer).
            unsafe { ptr.add(i).write(value) };
        }
        Some(Self { ptr, len, layout })
    }
}

impl<T: Copy> AsRef<[T]> for Pages<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialized values owned by `self` (or is dangling and
        // aligned when nothing was allocated), borrowed for `&self`'s lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> AsMut<[T]> for Pages<T> {
    fn as_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `as_ref`, borrowed uniquely for `&mut self`'s lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Pages<T> {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated by `filled` with this layout and not freed since; `T: Copy`
            // values need no drop.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
        }
    }
}

impl<T: Copy> fmt::Debug for Pages<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pages")
            .field("len", &self.len)
            .field("align", &self.layout.align())
            .finish_non_exhaustive()
    }
}

/// Advises the kernel to back `bytes` at `start` (a live allocation, [`HUGE_PAGE`]-aligned) with
/// transparent huge pages. A refusal (a kernel without THP) changes nothing, so it is ignored.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
))]
fn advise_huge_pages(start: *mut u8, bytes: usize) {
    use std::ffi::{c_int, c_void};
    /// `MADV_HUGEPAGE` in Linux's generic `mman-common.h`, which x86-64 and aarch64 use.
    const MADV_HUGEPAGE: c_int = 14;
    unsafe extern "C" {
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    // SAFETY: `start` is page-aligned and `bytes` long, one allocation of ours; the advice
    // changes how the range is backed, never its contents.
    let _refused = unsafe { madvise(start.cast(), bytes, MADV_HUGEPAGE) };
}

/// Elsewhere the allocation's alignment is all a table gets.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
)))]
fn advise_huge_pages(_start: *mut u8, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::{HUGE_PAGE, Pages};

    #[test]
    fn a_table_holds_its_values_and_takes_writes() {
        let mut pages = Pages::filled(1000, 7u64).unwrap();
        assert_eq!(pages.as_ref().len(), 1000);
        assert!(pages.as_ref().iter().all(|&v| v == 7));
        pages.as_mut()[999] = 9;
        assert_eq!(pages.as_ref()[999], 9);
        assert_eq!(pages.as_ref()[998], 7);
    }

    #[test]
    #[cfg_attr(miri, ignore = "writes 2 MiB one value at a time")]
    fn tables_of_a_huge_page_or_more_are_aligned_to_it() {
        let small = Pages::filled(HUGE_PAGE / 8 - 1, 1u64).unwrap();
        assert_eq!(small.layout.align(), align_of::<u64>());
        let large = Pages::filled(HUGE_PAGE / 8, 1u64).unwrap();
        assert_eq!(large.as_ref().as_ptr().addr() % HUGE_PAGE, 0);
        assert!(large.as_ref().iter().all(|&v| v == 1));
    }

    #[test]
    fn empty_and_zero_sized_tables_allocate_nothing() {
        let empty = Pages::filled(0, 1u64).unwrap();
        assert!(empty.as_ref().is_empty());
        assert_eq!(empty.as_ref(), &[] as &[u64]);
        let units = Pages::filled(5, ()).unwrap();
        assert_eq!(units.as_ref().len(), 5);
        assert_eq!(units.layout.size(), 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri reports the refused allocation as an error of its own"
    )]
    fn a_table_too_large_for_memory_is_none_not_an_abort() {
        assert!(
            Pages::filled(usize::MAX / 4, 0u64).is_none(),
            "size overflows"
        );
        assert!(Pages::filled(1 << 60, 0u64).is_none(), "beyond isize::MAX");
        assert!(
            Pages::filled(1 << 50, 0u64).is_none(),
            "8 PiB, refused by the allocator"
        );
    }
}
