//! Fresh host results: memory for a new result array, allocated without aborting on failure
//! and hinted towards huge pages, its pages left for the product to touch, or the spare that
//! a loop of products made ready ([`super::spare`]).

use std::mem::MaybeUninit;

use ndarray::{Array2, ShapeBuilder};

use super::{pages, spare};
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

/// The memory of [`fresh`]: `rows · cols` elements, not initialised (the spare, when it is of
/// that size).
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
    let taken = spare::take::<T>(len);
    spare::expect::<T>(len);
    match taken {
        Some(data) => Ok(data),
        None => pages::alloc_vec::<T>(len, bytes),
    }
}
