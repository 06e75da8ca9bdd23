//! From an ndarray view's strides to what a kernel reads.
//!
//! The kernels read a matrix either row-major (C order) or column-major (F order, i.e. a
//! transposed row-major matrix), with a leading dimension. A view that is contiguous in either
//! order is passed as it is; anything else (sliced with gaps, stepped, negative or zero
//! strides) is first copied into C order on the host.

use std::borrow::Cow;

use ndarray::{ArrayBase, Data, Ix2};

/// How an operand's memory is presented to a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Row-major and contiguous: read as it is.
    C,
    /// Column-major and contiguous: read as it is, transposed.
    F,
    /// Neither: copied into row-major order first.
    Copied,
}

/// An operand ready to upload: its elements in memory order and how to index them.
pub(crate) struct Operand<'a> {
    pub(crate) data: Cow<'a, [f32]>,
    /// Read column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    /// Leading dimension, in elements (never 0).
    pub(crate) ld: usize,
    pub(crate) layout: Layout,
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

/// Presents `a` to a kernel, borrowing its memory when its layout allows.
pub(crate) fn operand<S: Data<Elem = f32>>(a: &ArrayBase<S, Ix2>) -> Operand<'_> {
    let (rows, cols) = a.dim();
    match layout_of(a) {
        Layout::C => Operand {
            data: Cow::Borrowed(a.as_slice().expect("standard layout is a slice")),
            trans: false,
            ld: cols.max(1),
            layout: Layout::C,
        },
        Layout::F => Operand {
            data: Cow::Borrowed(a.as_slice_memory_order().expect("F order is a slice")),
            trans: true,
            ld: rows.max(1),
            layout: Layout::F,
        },
        Layout::Copied => Operand {
            data: Cow::Owned(a.iter().copied().collect()),
            trans: false,
            ld: cols.max(1),
            layout: Layout::Copied,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};

    fn sample(r: usize, c: usize) -> Array2<f32> {
        Array2::from_shape_fn((r, c), |(i, j)| (i * 100 + j) as f32)
    }

    /// Reads element (i, j) the way a kernel would.
    fn kernel_read(op: &Operand, i: usize, j: usize) -> f32 {
        if op.trans {
            op.data[j * op.ld + i]
        } else {
            op.data[i * op.ld + j]
        }
    }

    fn check_reads_match(a: ndarray::ArrayView2<f32>, want: Layout) {
        let op = operand(&a);
        assert_eq!(op.layout, want);
        for ((i, j), &v) in a.indexed_iter() {
            assert_eq!(kernel_read(&op, i, j), v, "element ({i}, {j})");
        }
    }

    #[test]
    fn contiguous_views_are_borrowed_and_read_in_place() {
        let a = sample(5, 7);
        check_reads_match(a.view(), Layout::C);
        check_reads_match(a.t(), Layout::F);
        assert!(matches!(operand(&a).data, Cow::Borrowed(_)));
        assert!(matches!(operand(&a.t()).data, Cow::Borrowed(_)));
    }

    #[test]
    fn strided_negative_and_broadcast_views_are_copied_in_c_order() {
        let a = sample(9, 11);
        check_reads_match(a.slice(s![1..8, 2..9]), Layout::Copied);
        check_reads_match(a.slice(s![..;2, ..;3]), Layout::Copied);
        check_reads_match(a.slice(s![..;-1, ..]), Layout::Copied);
        check_reads_match(a.slice(s![.., ..;-2]).reversed_axes(), Layout::Copied);
        let row = ndarray::Array1::from_vec(vec![1.0f32, 2.0, 3.0]);
        check_reads_match(row.broadcast((4, 3)).unwrap(), Layout::Copied);
    }

    #[test]
    fn full_width_row_slices_stay_contiguous() {
        let a = sample(9, 11);
        check_reads_match(a.slice(s![2..6, ..]), Layout::C);
        check_reads_match(a.slice(s![3..4, 1..5]), Layout::C);
    }
}
