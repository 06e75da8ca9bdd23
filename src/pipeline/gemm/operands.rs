//! Step 1 of a product, its operands: how the device reads A and B, and where C goes.

use cudarc::driver::CudaSlice;
use ndarray::ArrayView2;

use super::Gemm;
use crate::device::pinned;
use crate::element::Element;
use crate::engine::tuner;
use crate::host::staging::HostMat;
use crate::layout::classify;
use crate::pipeline::ends::{DevMat, Dst, Src};
use crate::pipeline::schedule::Residency;

/// A host operand as the device reads it.
#[derive(Clone, Copy)]
pub(super) struct Stored {
    /// The operand in the order it is packed: the view itself, or its transpose when that
    /// walks memory in order (F-order and column-strided views).
    pub(super) mat: HostMat,
    /// Whether `mat` is the transpose.
    pub(super) trans: bool,
}

impl Stored {
    pub(super) fn of<T: Element>(v: &ArrayView2<'_, T>) -> Stored {
        let m = HostMat::of_view(v);
        if classify(v).1 {
            Stored {
                mat: m.t(),
                trans: true,
            }
        } else {
            Stored {
                mat: m,
                trans: false,
            }
        }
    }

    /// Leading dimension of the packed operand (`panel` rows for a transposed A panel).
    pub(super) fn ld(&self, panel: usize) -> usize {
        if self.trans {
            panel
        } else {
            self.mat.dim().1
        }
    }
}

/// An operand as the kernels read it: packed from the host, or a device matrix.
pub(super) enum Input<'a, T> {
    Host(Stored),
    Device(DevMat<'a, T>),
}

impl<T> Clone for Input<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Input<'_, T> {}

impl<T> Clone for DevMat<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevMat<'_, T> {}

impl<T: Element> Input<'_, T> {
    pub(super) fn of<'a>(src: &Src<'a, T>) -> Input<'a, T> {
        match src {
            Src::Host(v) => Input::Host(Stored::of(v)),
            // Packed row by row, as the expand kernel reads them.
            Src::HostParts(v) => Input::Host(Stored {
                mat: HostMat::of_view(v),
                trans: false,
            }),
            Src::Device { mat, .. } => Input::Device(*mat),
        }
    }

    pub(super) fn host(&self) -> Option<Stored> {
        match self {
            Input::Host(s) => Some(*s),
            Input::Device(_) => None,
        }
    }

    /// Whether it is read transposed, and its leading dimension (`panel` rows for a host A
    /// panel).
    pub(super) fn layout(&self, panel: usize) -> (bool, usize) {
        match self {
            Input::Host(s) => (s.trans, s.ld(panel)),
            Input::Device(d) => (d.trans, d.ld),
        }
    }
}

/// Step 1, operands: how the device reads A and B and where C goes.
pub(super) struct Operands<'g, T> {
    pub(super) dims: (usize, usize, usize),
    pub(super) alpha: T,
    pub(super) beta: T,
    /// A and B are read (k > 0 and alpha ≠ 0).
    pub(super) multiply: bool,
    /// The kernel writes T and the epilogue forms `C = alpha·T + beta·C`.
    pub(super) needs_t: bool,
    pub(super) a: Input<'g, T>,
    pub(super) b: Input<'g, T>,
    /// B holds a host complex matrix's parts, which the first panel expands on the device
    /// ([`Src::HostParts`]): `k · n / 2` elements go up.
    pub(super) b_parts: bool,
    /// C on the host, and whether it is fresh memory.
    pub(super) c_host: Option<HostMat>,
    pub(super) fresh: bool,
    /// C on the device, with its leading dimension.
    pub(super) c_dev: Option<(&'g mut CudaSlice<T>, usize)>,
    pub(super) residency: Residency,
}

impl<'g, T: Element> Operands<'g, T> {
    pub(super) fn of<'a: 'g, 'b: 'g>(g: &'g mut Gemm<'_, 'a, 'b, '_, T>) -> Operands<'g, T> {
        let (m, k, n) = g.dims();
        let (alpha, beta) = (g.alpha, g.beta);
        let multiply = k > 0 && alpha != T::zero();
        let (c_host, c_dev, fresh) = match &mut *g.c {
            Dst::Host(v) => (Some(HostMat::of_view_mut(v)), None, false),
            Dst::Fresh(arr) => {
                assert!(beta == T::zero(), "a fresh output is never read");
                assert!(arr.is_standard_layout(), "a fresh output is C-contiguous");
                let ptr = arr.as_mut_ptr().cast::<T>();
                (Some(HostMat::row_major(ptr, m, n)), None, true)
            }
            Dst::Device { buf, ld, .. } => (None, Some((&mut **buf, *ld)), false),
        };
        assert!(
            !matches!(g.a, Src::HostParts(_)),
            "only B is read as a complex matrix's parts"
        );
        let (a, b) = (Input::of(g.a), Input::of(g.b));
        let b_parts = matches!(g.b, Src::HostParts(_));
        let residency = Residency {
            a_host: a.host().is_some(),
            b_host: b.host().is_some(),
            b_parts,
            c_host: c_host.is_some(),
            c_in: c_host.is_some() && beta != T::zero(),
        };
        Operands {
            dims: (m, k, n),
            alpha,
            beta,
            multiply,
            needs_t: multiply && !(alpha == T::one() && beta == T::zero()),
            a,
            b,
            b_parts,
            c_host,
            fresh,
            c_dev,
            residency,
        }
    }

    /// The elements of B that go up where B is a host operand.
    pub(super) fn b_up_len(&self) -> usize {
        let (_, k, n) = self.dims;
        self.residency.b_up_len(k, n)
    }

    /// Whether every host operand (one at least) is contiguous memory page-locked for the
    /// context `on` (its device's ordinal and generation), so that its copies can go straight
    /// by DMA; a fresh result never does (its pages are touched by the host's threads).
    fn direct(&self, on: (usize, u64)) -> bool {
        let locked = |m: &HostMat| {
            m.contiguous().is_some_and(|(addr, bytes)| {
                pinned::memory(addr, bytes, on) == pinned::Memory::Locked
            })
        };
        let host = [
            self.a.host().map(|s| s.mat),
            self.b.host().map(|s| s.mat),
            self.c_host,
        ];
        !self.fresh && host.iter().any(Option::is_some) && host.iter().flatten().all(locked)
    }

    /// What the tuner needs to know, for a product on the context `on`.
    pub(super) fn for_tuner(&self, on: (usize, u64)) -> tuner::Product {
        let (m, k, n) = self.dims;
        let (a_trans, a_ld) = self.a.layout(m);
        let (b_trans, b_ld) = self.b.layout(k);
        let r = self.residency;
        let read = |on_host: bool, len: usize| usize::from(on_host && self.multiply) * len;
        let per_16 = T::DTYPE.per_16_bytes();
        tuner::Product {
            dtype: T::DTYPE,
            dims: self.dims,
            trans: (a_trans, b_trans),
            residency: (r.a_host, r.b_host, r.c_host, r.c_in),
            direct: self.direct(on),
            aligned: a_ld % per_16 == 0 && b_ld % per_16 == 0,
            epilogue: self.needs_t || !self.multiply,
            host_bytes: T::DTYPE.size()
                * (read(r.a_host, m * k)
                    + read(r.b_host, self.b_up_len())
                    + (usize::from(r.c_host) + usize::from(r.c_in)) * m * n),
        }
    }
}
