//! [`PinnedArray`]: an ndarray array whose memory is page-locked for as long as the wrapper
//! owns it, so that products copy it straight to and from the device.

use std::fmt;
use std::ops::Deref;

use ndarray::{Array, ArrayViewMut, Dimension, Ix1, Ix2, Ix3, ShapeBuilder};
use num_traits::Zero;

use crate::device::pinned::{self, Registration};
use crate::error::GpuDotError;

/// An owned ndarray array whose memory is page-locked (pinned) for as long as this wrapper
/// owns it, like a PyTorch tensor after `pin_memory()`.
///
/// The device copies page-locked memory by DMA at the link's full speed. An ordinary array is
/// first packed into the crate's own page-locked staging by the host's threads, at the pace of
/// host memory; a pinned array's rows go straight between its memory and the device, with no
/// staging copy, both as operands and as a result written by
/// [`general_mat_mul`](crate::general_mat_mul) or [`GpuMatrix::copy_to`](crate::GpuMatrix::copy_to).
/// It pays where the same arrays cross the link many times (weights updated on the host
/// every step, batches refilled in place); registering memory costs more than one copy of it
/// saves (about 36 µs per MiB on an H100 host, measured with `examples/transfer --register`).
///
/// - **Reading**: the wrapper dereferences to the [`Array`], so slicing, views, element-wise
///   arithmetic into new arrays, `dot` and `gpu_dot` work on it unchanged: `p.gpu_dot(&w)`,
///   `x.gpu_dot(&*p)`, `p.view()`.
/// - **Writing**: through [`view_mut`](PinnedArray::view_mut) (in-place arithmetic,
///   `assign`, `general_mat_mul` into it) or [`as_slice_mut`](PinnedArray::as_slice_mut).
///   There is no `&mut Array`: `push_row` or `append` could move the buffer while it is
///   registered. [`into_inner`](PinnedArray::into_inner) unregisters it and gives the array
///   back.
/// - **Which views go straight**: a view that is contiguous in row-major order as the
///   product reads it (the whole array in C or F order, a band of rows of a C-order matrix,
///   a band of columns of an F-order one), in a product on the device that registered it (the
///   default device, `GPU_DOT_DEVICE`). Other views of it go through staging, as do the
///   smallest products, whose kernels read and write the staging in place, and products on
///   other devices. The route report says which ([`Route::Gpu`](crate::Route::Gpu)'s `host`).
/// - **Failure**: where the driver refuses to page-lock the memory (no GPU, a
///   `RLIMIT_MEMLOCK` limit, a container's, memory already registered), the array works as
///   an ordinary one and is staged; [`registration_error`](PinnedArray::registration_error)
///   says why, and so does the route report of every product through it
///   ([`HostCopies::Unlocked`](crate::HostCopies::Unlocked)). Nothing else changes.
///
/// ```
/// use gpu_dot::{GpuDot, PinnedArray};
/// use ndarray::Array2;
///
/// let mut w = PinnedArray::new(Array2::<f32>::ones((64, 64)));
/// let x = Array2::<f32>::ones((64, 8));
/// let y = w.gpu_dot(&x); // read straight from `w`'s memory (where page-locked)
/// assert_eq!(y[[0, 0]], 64.0);
/// w.view_mut().mapv_inplace(|v| v * 0.5); // updated in place, still registered
/// assert_eq!(w.gpu_dot(&x)[[0, 0]], 32.0);
/// let back: Array2<f32> = w.into_inner(); // unregistered
/// assert_eq!(back[[1, 1]], 0.5);
/// ```
pub struct PinnedArray<A, D: Dimension> {
    // Declared first, so dropped first: the memory is unregistered before it is freed.
    registration: Registration,
    array: Array<A, D>,
}

/// A pinned vector.
pub type PinnedArray1<A> = PinnedArray<A, Ix1>;
/// A pinned matrix.
pub type PinnedArray2<A> = PinnedArray<A, Ix2>;
/// A pinned stack of matrices (a batch).
pub type PinnedArray3<A> = PinnedArray<A, Ix3>;

impl<A: Clone, D: Dimension> PinnedArray<A, D> {
    /// Page-locks `array`'s memory in place, for as long as the wrapper owns it. An array
    /// whose elements are not contiguous in memory (an owned array sliced in place) is first
    /// copied into a new one in standard (C) order.
    pub fn new(array: Array<A, D>) -> PinnedArray<A, D> {
        let mut array = if array.as_slice_memory_order().is_some() {
            array
        } else {
            array.as_standard_layout().into_owned()
        };
        let slice = array
            .as_slice_memory_order_mut()
            .expect("contiguous: made so above");
        let bytes = std::mem::size_of_val(slice);
        // SAFETY: the memory is the array's, which this wrapper owns from here on; it hands
        // out no `&mut Array` (only views and slices, which cannot reallocate), and it drops
        // the registration before the array (field order), so the range stays allocated and
        // in place for the registration's whole life. Moving the wrapper moves the array's
        // header, not its heap buffer.
        let registration = unsafe { pinned::register(slice.as_mut_ptr().cast(), bytes) };
        PinnedArray {
            registration,
            array,
        }
    }

    /// A page-locked array of zeros of the given shape (C order, or F order with
    /// `.f()`), like [`Array::zeros`].
    pub fn zeros<Sh: ShapeBuilder<Dim = D>>(shape: Sh) -> PinnedArray<A, D>
    where
        A: Zero,
    {
        PinnedArray::new(Array::zeros(shape))
    }
}

impl<A, D: Dimension> PinnedArray<A, D> {
    /// Whether the memory is page-locked now: registered, and the device not reset since (a
    /// device fault resets it, dropping every registration; the array then stages like an
    /// ordinary one).
    pub fn is_page_locked(&self) -> bool {
        self.registration.locked()
    }

    /// Why the memory is not page-locked, where the driver refused (products then stage it).
    pub fn registration_error(&self) -> Option<&GpuDotError> {
        self.registration.error()
    }

    /// A mutable view of the whole array: for in-place arithmetic, `assign`, or a product's
    /// output. It cannot reallocate the memory, which stays registered.
    pub fn view_mut(&mut self) -> ArrayViewMut<'_, A, D> {
        self.array.view_mut()
    }

    /// The elements in memory order, mutably (the array is always contiguous).
    pub fn as_slice_mut(&mut self) -> &mut [A] {
        self.array
            .as_slice_memory_order_mut()
            .expect("a pinned array is contiguous")
    }

    /// Unregisters the memory and gives the array back.
    pub fn into_inner(self) -> Array<A, D> {
        let PinnedArray {
            registration,
            array,
        } = self;
        drop(registration);
        array
    }
}

impl<A, D: Dimension> Deref for PinnedArray<A, D> {
    type Target = Array<A, D>;

    fn deref(&self) -> &Array<A, D> {
        &self.array
    }
}

impl<A: Clone, D: Dimension> From<Array<A, D>> for PinnedArray<A, D> {
    fn from(array: Array<A, D>) -> PinnedArray<A, D> {
        PinnedArray::new(array)
    }
}

impl<A: Clone, D: Dimension> Clone for PinnedArray<A, D> {
    /// A copy in new memory, registered on its own.
    fn clone(&self) -> PinnedArray<A, D> {
        PinnedArray::new(self.array.clone())
    }
}

impl<A: fmt::Debug, D: Dimension> fmt::Debug for PinnedArray<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedArray")
            .field("page_locked", &self.is_page_locked())
            .field("array", &self.array)
            .finish()
    }
}
