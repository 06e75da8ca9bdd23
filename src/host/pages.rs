//! Host memory by pages: large allocations that fail with an error instead of aborting,
//! hinted towards transparent huge pages, and faulted in by writing each page.

use std::mem::MaybeUninit;

use crate::error::GpuDotError;

/// A transparent huge page.
pub(crate) const HUGE_PAGE: usize = 2 << 20;
/// A base page.
pub(crate) const PAGE: usize = 4 << 10;

/// `len` elements of `T`, not initialised, their pages not touched, hinted towards huge pages;
/// [`GpuDotError::HostOutOfMemory`] when the allocation fails. `bytes` is `len · size_of::<T>()`,
/// checked by the caller.
pub(crate) fn alloc_vec<T>(len: usize, bytes: usize) -> Result<Vec<MaybeUninit<T>>, GpuDotError> {
    debug_assert_eq!(Some(bytes), len.checked_mul(std::mem::size_of::<T>()));
    let mut data: Vec<MaybeUninit<T>> = Vec::new();
    data.try_reserve_exact(len)
        .map_err(|_| GpuDotError::HostOutOfMemory { bytes })?;
    advise_huge_pages(data.as_mut_ptr().cast(), bytes);
    // SAFETY: the capacity is at least `len` (reserved above), and MaybeUninit needs no
    // initialisation.
    unsafe { data.set_len(len) };
    Ok(data)
}

/// Writes a zero byte to every page of `[start, end)`, so that each exists afterwards.
///
/// # Safety
/// `[start, end)` lies in one allocation that the caller may write, and no other thread reads
/// or writes these bytes meanwhile; a zero byte must be a valid value there (as it is for
/// `MaybeUninit`).
pub(crate) unsafe fn touch_pages(start: usize, end: usize) {
    let mut at = start;
    while at < end {
        // SAFETY: `at` lies in [start, end), which the caller lets us write.
        unsafe { std::ptr::write_volatile(at as *mut u8, 0) };
        at = (at / PAGE + 1) * PAGE;
    }
}

/// Asks the kernel to back a large fresh allocation with transparent huge pages: the result
/// of a big product is written once, as a whole, and 2 MiB pages take 512 times fewer page
/// faults than 4 KiB ones. Only a hint; ignored where unsupported.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    if bytes < 2 * HUGE_PAGE {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation of `bytes` bytes at `ptr`, owned by
        // the caller and not yet shared; MADV_HUGEPAGE changes how pages are backed, never
        // their contents, and a failure (EINVAL where unsupported) is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _bytes: usize) {}
