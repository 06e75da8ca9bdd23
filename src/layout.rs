//! From an ndarray view's strides to what a kernel reads.
//!
//! The kernels read a matrix either row-major (C order) or column-major (F order, i.e. a
//! transposed row-major matrix), with a leading dimension. Host views are packed into staging
//! buffers in the order their memory is laid out (`pipeline.rs`); [`Layout`] reports how.

use ndarray::{ArrayBase, Data, Ix2};

/// How an operand's memory is presented to a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major and contiguous: copied row by row.
    C,
    /// Column-major and contiguous: copied as its transpose, read transposed by the kernels.
    F,
    /// Neither (gaps, steps, negative or zero strides): gathered element by element.
    Copied,
    /// Already on the device (a [`GpuMatrix`](crate::GpuMatrix) or a view of one): read in
    /// place.
    Device,
}

/// Classifies a view's memory layout without copying anything.
pub fn layout_of<S: Data<Elem = f32>>(a: &ArrayBase<S, Ix2>) -> Layout {
    if a.is_standard_layout() {
        Layout::C
    } else if a.t().is_standard_layout() {
        Layout::F
    } else {
        Layout::Copied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array1, Array2};

    #[test]
    fn views_are_classified_by_their_strides() {
        let a = Array2::<f32>::zeros((9, 11));
        assert_eq!(layout_of(&a), Layout::C);
        assert_eq!(layout_of(&a.t()), Layout::F);
        assert_eq!(layout_of(&a.slice(s![2..6, ..])), Layout::C);
        assert_eq!(layout_of(&a.slice(s![1..8, 2..9])), Layout::Copied);
        assert_eq!(layout_of(&a.slice(s![..;2, ..])), Layout::Copied);
        assert_eq!(layout_of(&a.slice(s![..;-1, ..])), Layout::Copied);
        let row = Array1::<f32>::zeros(3);
        assert_eq!(layout_of(&row.broadcast((4, 3)).unwrap()), Layout::Copied);
    }
}
