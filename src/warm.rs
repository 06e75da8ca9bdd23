//! Paying for kernels up front: [`warm_up`] loads every kernel family that products of the
//! given element types will launch, compiling with NVRTC what the crate ships no CUBIN for.

use std::time::Instant;

use crate::device::context;
use crate::device::modules::ModuleLoad;
use crate::element::Dtype;
use crate::engine::family::Family;
use crate::error::GpuDotError;
use crate::options::DotOptions;
use crate::route;

/// What [`warm_up`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WarmUp {
    /// The device warmed, by ordinal.
    pub device: usize,
    /// Milliseconds it took, the device's context included when this made it.
    pub ms: f64,
    /// The modules the products need, with what each cost on its first use (now or before).
    pub modules: Vec<ModuleLoad>,
}

/// Makes the kernels that products and batches of `dtypes` with `options` (their device,
/// precision and kernel) will launch ready now, instead of on the first product: creates the device's
/// context and loads each kernel family, from the CUBINs the crate ships for the device's
/// architecture (milliseconds), the on-disk cache, or NVRTC (seconds to minutes on devices
/// the crate ships no CUBINs for; a compilation already running on a background thread is
/// waited for, not repeated). Returns what it did and how long it took.
///
/// ```no_run
/// use gpu_dot::{warm_up, DotOptions, Dtype};
///
/// let done = warm_up(&DotOptions::default(), &[Dtype::F32, Dtype::F64])?;
/// println!("kernels ready in {:.0} ms", done.ms);
/// # Ok::<(), gpu_dot::GpuDotError>(())
/// ```
///
/// # Errors
/// [`GpuDotError::NoDevice`] without a usable GPU, [`GpuDotError::Compile`] with NVRTC's log
/// when a family does not compile, and the driver's error when a module does not load.
pub fn warm_up(options: &DotOptions, dtypes: &[Dtype]) -> Result<WarmUp, GpuDotError> {
    let start = Instant::now();
    let gpu = context::gpu_on(route::device_for(options, [])?)?;
    let sm = gpu.kernel_sm();
    let mut families: Vec<Family> = Vec::new();
    for &dtype in dtypes {
        for batched in [false, true] {
            for family in Family::serving(dtype, options.precision, options.kernel, sm, batched) {
                if !families.contains(&family) {
                    families.push(family);
                }
            }
        }
    }
    let mut modules: Vec<ModuleLoad> = Vec::new();
    let mut i = 0;
    while let Some(&family) = families.get(i) {
        i += 1;
        match gpu.load(family) {
            Ok(load) => modules.push(load),
            // A family with a stand-in (the warpgroup kernels): its products run the stand-in.
            Err(GpuDotError::Compile { .. }) if family.stand_in(options.precision).is_some() => {
                let stand_in = family.stand_in(options.precision);
                if let Some(f) = stand_in.filter(|f| !families.contains(f)) {
                    families.push(f);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(WarmUp {
        device: gpu.info.ordinal,
        ms: start.elapsed().as_secs_f64() * 1e3,
        modules,
    })
}
