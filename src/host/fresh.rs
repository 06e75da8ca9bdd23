//! Fresh host results: memory for a new result array, allocated without aborting on failure
//! and hinted towards huge pages, its pages left for the product to touch.

use std::mem::MaybeUninit;

use ndarray::{Array2, ShapeBuilder};

use crate::element::Element;
use crate::error::GpuDotError;

/// A new `rows × cols` host array (F order when `f_order`, else C order), not initialised,
/// or [`GpuDotError::HostOutOfMemory`] when the allocation fails (instead of aborting the
/// process). Its pages are not touched here: the product that fills it touches them on several
/// threads while the device works.
pub(crate) fn fresh<T: Element>(
    (rows, cols): (usize, usize),
    f_order: bool,
) -> Result<Array2<MaybeUninit<T>>, GpuDotError> {
    let data = fresh_vec::<T>((rows, cols))?;
    Ok(Array2::from_shape_vec((rows, cols).set_f(f_order), data).expect("rows · cols elements"))
}

/// The memory of [`fresh`]: `rows · cols` elements, not initialised.
pub(crate) fn fresh_vec<T: Element>(
    (rows, cols): (usize, usize),
) -> Result<Vec<MaybeUninit<T>>, GpuDotError> {
    let too_large = GpuDotError::TooLarge {
        dims: (rows, 0, cols),
    };
    let len = rows.checked_mul(cols).ok_or(too_large.clone())?;
    let bytes = len
        .checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(too_large)?;
    let mut data: Vec<MaybeUninit<T>> = Vec::new();
    data.try_reserve_exact(len)
        .map_err(|_| GpuDotError::HostOutOfMemory { bytes })?;
    advise_huge_pages(data.as_mut_ptr().cast(), bytes);
    // SAFETY: the capacity is at least `len` (reserved above), and MaybeUninit needs no
    // initialisation.
    unsafe { data.set_len(len) };
    Ok(data)
}

/// Asks the kernel to back a large fresh allocation with transparent huge pages: the result
/// of a big product is written once, as a whole, and 2 MiB pages take 512 times fewer page
/// faults than 4 KiB ones. Only a hint; ignored where unsupported.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < 2 * HUGE {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) / HUGE * HUGE;
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
