//! From an ndarray view's strides to what a kernel reads.
//!
//! The kernels read a matrix either row-major (C order) or column-major (F order, i.e. a
//! transposed row-major matrix), with a leading dimension. Host views are packed into staging
//! buffers in the order their memory is laid out (`pipeline.rs`); [`Layout`] reports how.

use ndarray::{ArrayBase, Data, Ix2};

use crate::element::Element;

/// How an operand's memory is presented to a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// Each row contiguous (C order, or a window of a C-order array): copied row by row.
    C,
    /// Each column contiguous (F order, or a window of one): copied as its transpose, read
    /// transposed by the kernels.
    F,
    /// Neither (steps, negative or zero strides): gathered element by element.
    Copied,
    /// Already on the device (a [`GpuMatrix`](crate::GpuMatrix) or a view of one): read in
    /// place.
    Device,
}

/// Classifies a view's memory layout without copying anything: what the route report says
/// and how the pipeline packs the operand.
pub fn layout_of<A: Element, S: Data<Elem = A>>(a: &ArrayBase<S, Ix2>) -> Layout {
    classify(a).0
}

/// The one layout classifier: the layout, and whether the operand is packed as its
/// transpose (read column by column) because its columns are the denser direction.
pub(crate) fn classify<A, S: Data<Elem = A>>(a: &ArrayBase<S, Ix2>) -> (Layout, bool) {
    let (rows, cols) = a.dim();
    let (rs, cs) = (a.strides()[0], a.strides()[1]);
    let trans = rows > 1 && cols > 1 && rs.unsigned_abs() < cs.unsigned_abs();
    // Whether the walk along the packed order's rows is contiguous.
    let runs = |inner: usize, outer: usize, inner_stride: isize, outer_stride: isize| {
        if inner > 1 {
            inner_stride == 1
        } else {
            outer <= 1 || outer_stride == 1
        }
    };
    let layout = match trans {
        false if runs(cols, rows, cs, rs) => Layout::C,
        true if runs(rows, cols, rs, cs) => Layout::F,
        _ => Layout::Copied,
    };
    (layout, trans)
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
        // Windows keep their rows (or columns) contiguous: packed run by run.
        assert_eq!(layout_of(&a.slice(s![1..8, 2..9])), Layout::C);
        assert_eq!(layout_of(&a.t().slice(s![1..8, 2..9])), Layout::F);
        assert_eq!(layout_of(&a.slice(s![.., ..;2])), Layout::Copied);
        assert!(!classify(&a.slice(s![.., ..;2])).1);
        assert!(classify(&a.t()).1);
        assert_eq!(layout_of(&a.slice(s![..;2, ..])), Layout::C);
        assert_eq!(layout_of(&a.slice(s![..;-1, ..])), Layout::C);
        assert_eq!(layout_of(&a.slice(s![.., ..;-1])), Layout::Copied);
        let row = Array1::<f32>::zeros(3);
        assert_eq!(layout_of(&row.broadcast((4, 3)).unwrap()), Layout::Copied);
    }
}
