//! Shapes and layouts from fuzz bytes: m, k, n up to 64 (and a different k for the right
//! operand now and then), each operand built by a recipe (stored transposed or not, a window
//! with offsets and padding, steps of ±1 to ±3 per axis, or a stride-0 broadcast of a row, a
//! column or one element), its values small integers, uniform floats, or with NaN, ±Inf, zeros
//! and subnormals mixed in.
//!
//! Asserts: `layout_of` says C or F only for views a kernel can read in place, in the order it
//! says; compatible shapes give ndarray's `dot` bit for bit under `Backend::Cpu`, the same
//! classes (NaN, ±Inf, finite) and finite values within the rounding bound under
//! `Backend::Auto`, `Backend::Gpu` (or its typed error without a device), `try_gpu_dot` and
//! `gpu_dot`; a zero dimension is `Route::Empty` with zeros; incompatible shapes give exactly
//! `ShapeMismatch` from every fallible entry point (`gpu_dot`, which panics on them by design,
//! is called only with compatible shapes). Any other panic is a finding.
#![no_main]

use gpu_dot::{
    device_status, layout_of, Backend, CpuReason, DeviceStatus, DotOptions, GpuDot, GpuDotError,
    Layout, Route,
};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ndarray::{s, Array2, ArrayView2, Slice};

const MAX_DIM: usize = 64;

/// How an operand is laid out in memory.
#[derive(Debug)]
enum Recipe {
    /// A `rows × cols` view of a larger matrix (stored in C order, or in F order when
    /// `transposed`), starting `top` rows and `left` columns in, stepping `steps` per axis
    /// (negative: backwards), with `pad` more rows and columns beyond it.
    Strided {
        transposed: bool,
        top: usize,
        left: usize,
        pad: usize,
        steps: (isize, isize),
    },
    /// A stored `1 × cols`, `rows × 1` or `1 × 1` matrix broadcast with stride 0.
    Broadcast { row: bool, column: bool },
}

/// How values are drawn.
#[derive(Debug, Clone, Copy)]
enum Values {
    /// Integers in -8..8: every product and sum is exact.
    SmallIntegers,
    /// Uniform in [-1, 1).
    Uniform,
    /// Uniform, with NaN, ±Inf, ±0, subnormals and large values mixed in.
    Special,
}

fn recipe(u: &mut Unstructured) -> Result<Recipe> {
    const STEPS: [isize; 6] = [1, -1, 2, -2, 3, -3];
    Ok(match u.int_in_range(0u8..=7)? {
        0 => Recipe::Broadcast {
            row: u.arbitrary()?,
            column: u.arbitrary()?,
        },
        _ => Recipe::Strided {
            transposed: u.arbitrary()?,
            top: u.int_in_range(0..=3)?,
            left: u.int_in_range(0..=3)?,
            pad: u.int_in_range(0..=3)?,
            steps: (*u.choose(&STEPS)?, *u.choose(&STEPS)?),
        },
    })
}

/// A small deterministic generator (xorshift64*), seeded from the fuzz bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn value(&mut self, values: Values) -> f32 {
        match values {
            Values::SmallIntegers => (self.next() % 16) as f32 - 8.0,
            Values::Uniform => self.unit(),
            Values::Special => match self.next() % 16 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                3 => 0.0,
                4 => -0.0,
                5 => self.unit() * f32::MIN_POSITIVE,
                6 => self.unit() * 1e30,
                _ => self.unit(),
            },
        }
    }
}

/// The storage behind an operand, and the view the recipe makes of it.
struct Operand {
    store: Array2<f32>,
    recipe: Recipe,
    dim: (usize, usize),
}

impl Operand {
    fn new(recipe: Recipe, (rows, cols): (usize, usize), values: Values, rng: &mut Rng) -> Self {
        let store_dim = match recipe {
            Recipe::Strided {
                transposed,
                top,
                left,
                pad,
                steps: (sr, sc),
            } => {
                let logical = (
                    top + rows * sr.unsigned_abs() + pad,
                    left + cols * sc.unsigned_abs() + pad,
                );
                if transposed {
                    (logical.1, logical.0)
                } else {
                    logical
                }
            }
            Recipe::Broadcast { row, column } => {
                (if row { 1 } else { rows }, if column { 1 } else { cols })
            }
        };
        let store = Array2::from_shape_simple_fn(store_dim, || rng.value(values));
        Operand {
            store,
            recipe,
            dim: (rows, cols),
        }
    }

    fn view(&self) -> ArrayView2<'_, f32> {
        let (rows, cols) = self.dim;
        let v = match self.recipe {
            Recipe::Strided {
                transposed,
                top,
                left,
                steps: (sr, sc),
                ..
            } => {
                let logical = if transposed {
                    self.store.t()
                } else {
                    self.store.view()
                };
                let (er, ec) = (
                    top + rows * sr.unsigned_abs(),
                    left + cols * sc.unsigned_abs(),
                );
                logical.slice_move(s![
                    Slice::new(top as isize, Some(er as isize), sr),
                    Slice::new(left as isize, Some(ec as isize), sc)
                ])
            }
            Recipe::Broadcast { .. } => self
                .store
                .broadcast((rows, cols))
                .expect("a length-1 axis broadcasts"),
        };
        assert_eq!(v.dim(), self.dim, "{:?}", self.recipe);
        v
    }
}

/// `layout_of` may say C or F only when the kernel's in-place read of that order gives the
/// view's elements.
fn check_layout(v: &ArrayView2<f32>) {
    let (rows, cols) = v.dim();
    match layout_of(v) {
        Layout::C => {
            let data = v.as_slice().expect("a C-order view is one slice");
            for ((i, j), &x) in v.indexed_iter() {
                assert_eq!(data[i * cols + j].to_bits(), x.to_bits());
            }
        }
        Layout::F => {
            let data = v
                .t()
                .to_slice()
                .expect("an F-order view is one slice, transposed");
            for ((i, j), &x) in v.indexed_iter() {
                assert_eq!(data[j * rows + i].to_bits(), x.to_bits());
            }
        }
        Layout::Copied => {
            assert!(!v.is_standard_layout() && !v.t().is_standard_layout());
        }
        Layout::Device => panic!("a host view classed as on the device"),
    }
}

fn class(x: f32) -> u8 {
    if x.is_nan() {
        0
    } else if x.is_infinite() {
        1 + (x > 0.0) as u8
    } else {
        3
    }
}

/// `c` has ndarray's classes at every position and finite values within twice the worst-case
/// rounding bound of a k-term dot product (plus k subnormal spacings).
fn within_tolerance(
    c: &Array2<f32>,
    expected: &Array2<f32>,
    a: &ArrayView2<f32>,
    b: &ArrayView2<f32>,
) {
    assert_eq!(c.dim(), expected.dim());
    let k = a.ncols();
    let finite_abs = |x: f32| {
        if x.is_finite() {
            f64::from(x.abs())
        } else {
            0.0
        }
    };
    let ku = k as f64 * f64::from(f32::EPSILON) / 2.0;
    for ((i, j), &x) in c.indexed_iter() {
        let y = expected[[i, j]];
        assert_eq!(
            class(x),
            class(y),
            "C[{i}, {j}] = {x:e}, ndarray's dot gives {y:e}"
        );
        if y.is_finite() {
            let s: f64 = (0..k)
                .map(|p| finite_abs(a[[i, p]]) * finite_abs(b[[p, j]]))
                .sum();
            let bound = 2.0 * (ku / (1.0 - ku) * s + k as f64 * 1.5e-45);
            let err = (f64::from(x) - f64::from(y)).abs();
            assert!(
                err <= bound,
                "C[{i}, {j}] = {x:e}, ndarray's dot gives {y:e}"
            );
        }
    }
}

fn same_bits(c: &Array2<f32>, expected: &Array2<f32>) -> bool {
    c.dim() == expected.dim()
        && c.iter()
            .zip(expected)
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The staging copies: `pack` gives the view's elements in row-major order, and `unpack` puts
/// them back into a view of any layout (here the transpose of an F-order array and a stepped,
/// reversed window of a larger one), leaving everything outside the view alone.
fn check_staging(v: &ArrayView2<f32>) {
    use gpu_dot::__fuzz::{pack, unpack};
    let (rows, cols) = v.dim();
    let mut flat = vec![f32::NAN; rows * cols];
    pack(*v, &mut flat);
    for (x, y) in flat.iter().zip(v.iter()) {
        assert_eq!(x.to_bits(), y.to_bits());
    }
    // A NaN with a payload no value recipe makes marks the elements outside the views.
    let mark = f32::from_bits(0x7FC0_5EED);
    let mut f = Array2::<f32>::from_elem((cols, rows), mark);
    unpack(&flat, f.view_mut().reversed_axes());
    for ((i, j), &x) in v.indexed_iter() {
        assert_eq!(f[[j, i]].to_bits(), x.to_bits());
    }
    let mut big = Array2::<f32>::from_elem((2 * rows + 1, cols + 2), mark);
    unpack(&flat, big.slice_mut(ndarray::s![1..;-2, 1..cols + 1]));
    let window = big.slice(ndarray::s![1..;-2, 1..cols + 1]);
    for (x, y) in window.iter().zip(v.iter()) {
        assert_eq!(x.to_bits(), y.to_bits());
    }
    let outside = big
        .iter()
        .filter(|&&x| x.to_bits() == mark.to_bits())
        .count();
    assert_eq!(
        outside,
        big.len() - rows * cols,
        "unpack wrote outside its view"
    );
}

fn run(u: &mut Unstructured) -> Result<()> {
    let m = u.int_in_range(0..=MAX_DIM)?;
    let k = u.int_in_range(0..=MAX_DIM)?;
    let n = u.int_in_range(0..=MAX_DIM)?;
    let k2 = if u.ratio(1u8, 8)? {
        u.int_in_range(0..=MAX_DIM)?
    } else {
        k
    };
    let values = *u.choose(&[Values::SmallIntegers, Values::Uniform, Values::Special])?;
    let (ra, rb) = (recipe(u)?, recipe(u)?);
    let mut rng = Rng(u.arbitrary::<u64>()? | 1);
    let a = Operand::new(ra, (m, k), values, &mut rng);
    let b = Operand::new(rb, (k2, n), values, &mut rng);
    let (a, b) = (a.view(), b.view());
    check_layout(&a);
    check_layout(&b);
    check_staging(&a);
    check_staging(&b);

    let backends = [Backend::Cpu, Backend::Auto, Backend::Gpu];
    if k != k2 {
        let mismatch = |r: std::result::Result<Array2<f32>, GpuDotError>| match r {
            Err(GpuDotError::ShapeMismatch {
                m: m2,
                k: k3,
                k2: k4,
                n: n2,
            }) => assert_eq!((m2, k3, k4, n2), (m, k, k2, n)),
            other => panic!("{m}×{k} · {k2}×{n}: {:?}", other.map(|c| c.dim())),
        };
        mismatch(a.try_gpu_dot(&b));
        for backend in backends {
            let opts = DotOptions::builtin().backend(backend).min_gpu_flops(0);
            mismatch(a.try_gpu_dot_with(&b, &opts).map(|p| p.c));
        }
        return Ok(());
    }

    let expected = a.dot(&b);
    let empty = m == 0 || k == 0 || n == 0;
    for backend in backends {
        let opts = DotOptions::builtin().backend(backend);
        let p = match (a.try_gpu_dot_with(&b, &opts), device_status()) {
            (Ok(p), _) => p,
            (Err(GpuDotError::NoDevice { .. }), DeviceStatus::Unavailable(_))
                if backend == Backend::Gpu && !empty =>
            {
                continue
            }
            (Err(e), _) => panic!("{backend}: {e}"),
        };
        match (&p.route, backend) {
            (Route::Empty, _) => assert!(empty),
            (Route::Cpu(CpuReason::Requested), Backend::Cpu) => {
                assert!(
                    same_bits(&p.c, &expected),
                    "Backend::Cpu is not ndarray's dot"
                )
            }
            (Route::Cpu(CpuReason::BelowThreshold { .. }), Backend::Auto) => {}
            (Route::Gpu { .. }, Backend::Auto | Backend::Gpu) => {}
            (route, _) => panic!("{backend}: route {route:?}"),
        }
        within_tolerance(&p.c, &expected, &a, &b);
    }
    within_tolerance(
        &a.try_gpu_dot(&b).expect("compatible shapes"),
        &expected,
        &a,
        &b,
    );
    within_tolerance(&a.gpu_dot(&b), &expected, &a, &b);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
