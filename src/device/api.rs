//! The device API the crate exports: [`Device`], [`device_status`] and the counters of
//! compilations, module loads and context rebuilds.

use std::fmt;
use std::sync::Arc;

use crate::device::compiler;
use crate::device::context::{self, DeviceInfo, Gpu};
use crate::device::libraries;
use crate::device::modules::ModuleLoad;
use crate::error::GpuDotError;

/// Whether the GPU path is usable, as [`device_status`] reports it.
///
/// Two states, and only two: a device is usable or it is not, with the reason. Matching on
/// both is exhaustive, and stays so.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceStatus {
    /// A device is ready.
    Ready(DeviceInfo),
    /// No GPU is usable, and why.
    Unavailable(String),
}

impl DeviceStatus {
    /// The device's description where it is ready.
    pub fn info(&self) -> Option<&DeviceInfo> {
        match self {
            DeviceStatus::Ready(info) => Some(info),
            _ => None,
        }
    }

    /// Why no GPU is usable, where none is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            DeviceStatus::Unavailable(reason) => Some(reason),
            _ => None,
        }
    }

    /// Whether a device is ready.
    pub fn is_ready(&self) -> bool {
        self.info().is_some()
    }
}

impl fmt::Display for DeviceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceStatus::Ready(d) => write!(
                f,
                "{} (device {}, compute capability {}.{}, {} SMs, {:.1} GiB)",
                d.name,
                d.ordinal,
                d.compute_capability.0,
                d.compute_capability.1,
                d.multiprocessors,
                d.total_memory as f64 / (1u64 << 30) as f64
            ),
            DeviceStatus::Unavailable(reason) => write!(f, "no usable GPU: {reason}"),
        }
    }
}

/// Reports the default device ([`Device::default`]), creating its context if this is its
/// first use.
///
/// Never panics: a missing driver, a missing NVRTC or a machine without a device give
/// [`DeviceStatus::Unavailable`] with the reason.
pub fn device_status() -> DeviceStatus {
    match context::default_ordinal() {
        Ok(ordinal) => Device::new(ordinal).status(),
        Err(e) => DeviceStatus::Unavailable(format!("{e:#}")),
    }
}

/// One CUDA device of this machine, by ordinal: a handle, cheap to copy, that makes nothing
/// until used.
///
/// Each device the crate uses has its own context, compiled modules, streams, idle
/// workspaces and tuned plans; a fault on one device rebuilds only that device's context.
/// [`DotOptions::device`](crate::DotOptions::device) sends a product to a device, and
/// [`GpuMatrix::from_array_on`](crate::GpuMatrix::from_array_on) puts a matrix there. Without
/// either, products run on the default device: `GPU_DOT_DEVICE`, else device 0.
///
/// ```no_run
/// use gpu_dot::Device;
///
/// for device in Device::all() {
///     println!("{device}: {}", device.status());
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    ordinal: usize,
}

/// A device by ordinal: every method that takes a device takes a `Device` or its ordinal.
impl From<usize> for Device {
    fn from(ordinal: usize) -> Device {
        Device::new(ordinal)
    }
}

/// The device's ordinal.
impl From<Device> for usize {
    fn from(device: Device) -> usize {
        device.ordinal()
    }
}

impl Device {
    /// The device of ordinal `ordinal` (whether it exists is known on first use).
    pub const fn new(ordinal: usize) -> Device {
        Device { ordinal }
    }

    /// How many CUDA devices the driver reports: 0 without a driver (never panics).
    pub fn count() -> usize {
        libraries::device_count().unwrap_or(0)
    }

    /// Every device the driver reports, by ordinal.
    pub fn all() -> Vec<Device> {
        (0..Device::count()).map(Device::new).collect()
    }

    /// The ordinal.
    pub const fn ordinal(self) -> usize {
        self.ordinal
    }

    /// Whether the device is usable, creating its context if this is its first use. Never
    /// panics.
    pub fn status(self) -> DeviceStatus {
        match context::gpu_on(self.ordinal) {
            Ok(gpu) => DeviceStatus::Ready(gpu.info.clone()),
            Err(e) => DeviceStatus::Unavailable(match e {
                GpuDotError::NoDevice { reason } => reason,
                other => format!("{other:#}"),
            }),
        }
    }

    /// The modules loaded on this device so far, with what each cost on first use (empty
    /// when the device has not been used).
    pub fn module_loads(self) -> Vec<ModuleLoad> {
        match self.live() {
            Some(gpu) => gpu.module_loads(),
            None => Vec::new(),
        }
    }

    /// The device's context in use, if it has been made and has not faulted.
    pub(crate) fn live(self) -> Option<Arc<Gpu>> {
        context::live()
            .into_iter()
            .find(|g| g.info.ordinal == self.ordinal)
    }

    /// How many times this process has rebuilt the device's context after a fault.
    pub fn context_rebuilds(self) -> usize {
        context::rebuilds_on(self.ordinal)
    }
}

impl Default for Device {
    /// The device that serves products whose options name none: `GPU_DOT_DEVICE`, else 0
    /// (also 0 when `GPU_DOT_DEVICE` is not an ordinal; products then report that error).
    fn default() -> Device {
        Device::new(context::default_ordinal().unwrap_or(0))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.ordinal)
    }
}

/// NVRTC compilations made by this process so far (each module is compiled at most once,
/// whichever device or thread asks).
pub fn nvrtc_compilations() -> usize {
    compiler::compilations()
}

/// NVRTC compilations running now, in the foreground or on background threads.
pub fn nvrtc_compilations_in_flight() -> usize {
    compiler::in_flight()
}

/// The modules loaded on the default device so far, with what each cost on first use
/// (makes the device's context if it has none yet).
pub fn module_loads() -> Vec<ModuleLoad> {
    match context::gpu() {
        Ok(gpu) => gpu.module_loads(),
        Err(_) => Vec::new(),
    }
}

/// How many times this process has rebuilt a CUDA context after a fault, on every device.
pub fn context_rebuilds() -> usize {
    context::rebuilds()
}
