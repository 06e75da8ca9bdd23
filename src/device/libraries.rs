//! The driver library and NVRTC: found through the dynamic loader, with every entry point
//! the crate calls, before cudarc touches them (cudarc panics on a missing library).

use cudarc::driver::CudaContext;
use once_cell::sync::OnceCell;

/// The driver entry points the crate calls (through cudarc).
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventElapsedTime",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuMemGetInfo_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuOccupancyMaxActiveClusters",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// The NVRTC entry points the crate calls (through cudarc).
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
];

/// Whether the driver and NVRTC libraries are loaded and have every entry point the crate
/// calls; checked once per process.
fn libraries() -> Result<(), String> {
    static READY: OnceCell<Result<(), String>> = OnceCell::new();
    READY
        .get_or_init(|| {
            std::panic::catch_unwind(check_libraries)
                .unwrap_or_else(|_| Err("the CUDA driver library panicked while loading".into()))
        })
        .clone()
}

/// The file names the driver library and NVRTC go by, most common first.
#[cfg(windows)]
const LIBRARY_NAMES: [&[&str]; 2] = [
    &["nvcuda.dll"],
    &[
        "nvrtc64_130_0.dll",
        "nvrtc64_120_0.dll",
        "nvrtc64_13.dll",
        "nvrtc64_12.dll",
        "nvrtc.dll",
    ],
];
#[cfg(not(windows))]
const LIBRARY_NAMES: [&[&str]; 2] = [
    &["libcuda.so.1", "libcuda.so"],
    &[
        "libnvrtc.so",
        "libnvrtc.so.12",
        "libnvrtc.so.13",
        "libnvrtc.so.11",
    ],
];

/// Opens the first of `names` the dynamic loader finds.
fn open_library(names: &[&str]) -> Option<libloading::Library> {
    names.iter().find_map(|name| {
        // SAFETY: the driver library and NVRTC run no initialisation code with requirements
        // on the caller when loaded; the handle only looks symbols up and is dropped after.
        unsafe { libloading::Library::new(*name) }.ok()
    })
}

/// Checks the two libraries through the dynamic loader itself, whichever way cudarc is
/// built to reach them (loaded at run time, or linked by another crate's choice of cudarc
/// features): both present, with every entry point the crate calls.
fn check_libraries() -> Result<(), String> {
    let [driver_names, nvrtc_names] = LIBRARY_NAMES;
    let Some(driver) = open_library(driver_names) else {
        return Err("the CUDA driver library (libcuda) was not found".into());
    };
    let Some(nvrtc) = open_library(nvrtc_names) else {
        return Err("the NVRTC library (libnvrtc) was not found".into());
    };
    // cudarc looks each entry point up on its first call and panics if it is missing; check
    // them all now, so that an old driver or NVRTC is a reason, never a panic later.
    // SAFETY: `get` only looks a symbol up; nothing is called.
    let missing = unsafe {
        DRIVER_SYMBOLS
            .iter()
            .find(|name| driver.get::<*const ()>(name.as_bytes()).is_err())
            .map(|name| {
                format!("the CUDA driver library lacks {name} (a driver older than CUDA 12?)")
            })
            .or_else(|| {
                NVRTC_SYMBOLS
                    .iter()
                    .find(|name| nvrtc.get::<*const ()>(name.as_bytes()).is_err())
                    .map(|name| {
                        format!("the NVRTC library lacks {name} (NVRTC older than CUDA 12?)")
                    })
            })
    };
    if let Some(reason) = missing {
        return Err(reason);
    }
    // cudarc finds the libraries by its own list of names (and panics where it finds none):
    // have it load both now, where a panic is caught, rather than at a later call.
    let loads = std::panic::catch_unwind(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion only writes the two integers it is given.
        let nvrtc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        (cudarc::driver::result::init(), nvrtc)
    });
    match loads {
        Ok((Ok(()), cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS)) => Ok(()),
        Ok((Err(e), _)) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => {
            Err("the CUDA driver found no device".into())
        }
        Ok((Err(e), _)) => Err(format!("the CUDA driver could not initialise: {e:?}")),
        Ok((_, e)) => Err(format!("NVRTC does not answer: {e:?}")),
        Err(_) => Err(
            "cudarc could not load the CUDA driver library or NVRTC under the names it knows \
             (a CUDA 13 install needs the unversioned libnvrtc.so with the cuda-12080 bindings)"
                .into(),
        ),
    }
}

/// How many CUDA devices the driver reports, or why it cannot say.
pub(crate) fn device_count() -> Result<usize, String> {
    libraries()?;
    let count = CudaContext::device_count()
        .map_err(|e| format!("the CUDA driver could not count devices: {e}"))?;
    Ok(count.max(0) as usize)
}
