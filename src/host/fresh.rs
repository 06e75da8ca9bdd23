//! Fresh host results: memory for a new result array, allocated without aborting on failure
//! and hinted towards huge pages, its pages left for the product to touch; and the spare, the
//! next result of a loop made ready in the background.
//!
//! A fresh result of 32 MiB or more is new memory from the system (the allocator maps it),
//! and the kernel zeroes each of its pages when the product first writes it: at 10–35 GB/s,
//! as long as the copies that bring the result down. When the same size comes twice in a row
//! (a loop), a background thread allocates the next result and faults in its pages between
//! products; the next product of that size takes it, ready or as far as it got. One spare at
//! most, of at most 256 MiB, is kept; [`trim_spare`] (the crate's `trim`) frees it, and
//! `GPU_DOT_SPARE_RESULT=0` turns it off.

use std::any::{Any, TypeId};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ndarray::{Array2, ShapeBuilder};

use crate::element::Element;
use crate::error::GpuDotError;
use once_cell::sync::Lazy;

/// A transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

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
    if *SPARE_ON && spare_sized::<T>(len) {
        if let Some(spare) = take_spare::<T>(len) {
            return Ok(spare);
        }
    }
    let mut data: Vec<MaybeUninit<T>> = Vec::new();
    data.try_reserve_exact(len)
        .map_err(|_| GpuDotError::HostOutOfMemory { bytes })?;
    advise_huge_pages(data.as_mut_ptr().cast(), bytes);
    // SAFETY: the capacity is at least `len` (reserved above), and MaybeUninit needs no
    // initialisation.
    unsafe { data.set_len(len) };
    Ok(data)
}

/// Asks the kernel to back a large fresh allocation with transparent huge pages: the result
/// of a big product is written once, as a whole, and 2 MiB pages take 512 times fewer page
/// faults than 4 KiB ones. Only a hint; ignored where unsupported.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    if bytes < 2 * HUGE_PAGE {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation of `bytes` bytes at `ptr`, owned by
        // the caller and not yet shared; MADV_HUGEPAGE changes how pages are backed, never
        // their contents, and a failure (EINVAL where unsupported) is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _bytes: usize) {}

/// Results of fewer bytes get no spare: the allocator keeps freed blocks of that size (glibc
/// reuses freed memory below its mmap threshold, which grows to 32 MiB), so their pages
/// usually exist already.
pub(crate) const SPARE_MIN_BYTES: usize = 32 << 20;
/// Results of more bytes get no spare: what the spare keeps between calls stays below this
/// (256 MiB: an `f32` 8192² or `f64` 8192 × 4096 result).
pub(crate) const SPARE_MAX_BYTES: usize = 256 << 20;
/// Most threads that fault in a spare's pages (one per 32 MiB).
const SPARE_THREADS: usize = 4;
/// How long after a product the spare's preparation waits before it starts: a loop that calls
/// again within this time (products back to back) finds it not started and allocates as
/// without a spare, so that the preparation never competes with a product for the memory
/// bus; a loop with work between its products gets the spare.
const SPARE_DELAY: Duration = Duration::from_millis(1);
const PAGE: usize = 4 << 10;

/// `GPU_DOT_SPARE_RESULT`: whether loops of large products get their next result's memory
/// ready in the background (on unless switched off; any other value is ignored, with a
/// warning).
static SPARE_ON: Lazy<bool> =
    Lazy::new(|| crate::settings::SPARE_RESULT.switch_from_env("the spare result stays on"));

/// Memory for the next result, its pages faulted in.
struct Spare {
    ty: TypeId,
    len: usize,
    bytes: usize,
    /// A `Vec<MaybeUninit<T>>` of `len` elements, `T` the element of `ty`.
    vec: Box<dyn Any + Send>,
}

enum State {
    Empty,
    /// Job `job` waits out [`SPARE_DELAY`]; a product that comes meanwhile empties the slot
    /// and the job ends without allocating.
    Pending {
        job: u64,
    },
    /// Job `job` is allocating a spare and faulting in its pages; setting `cancel` makes it
    /// stop after the page it is on and hand the spare over as it is.
    Preparing {
        cancel: Arc<AtomicBool>,
    },
    Ready(Spare),
}

struct Slot {
    state: State,
    /// The element type and length of the last fresh result of spare size: the same again
    /// asks for a spare.
    last: Option<(TypeId, usize)>,
    /// Jobs started so far (the next one's number).
    jobs: u64,
}

/// The one spare of the process, and the condition its state changes on.
static SLOT: Mutex<Slot> = Mutex::new(Slot {
    state: State::Empty,
    last: None,
    jobs: 0,
});
static CHANGED: Condvar = Condvar::new();

type Job = Box<dyn FnOnce() + Send>;

fn lock_slot() -> MutexGuard<'static, Slot> {
    // The state is replaced whole under the lock, so a panic elsewhere leaves it valid.
    SLOT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a result of `len` elements of `T` is of a size that gets a spare.
fn spare_sized<T: Element>(len: usize) -> bool {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    (SPARE_MIN_BYTES..=SPARE_MAX_BYTES).contains(&bytes)
}

/// The spare, if it is `len` elements of `T`: ready, or taken from the background thread as
/// far as it got (the product's own touching faults in the rest). A spare of another size
/// is freed, so that it does not stay beside the new result.
fn take_spare<T: Element>(len: usize) -> Option<Vec<MaybeUninit<T>>> {
    let mut slot = lock_slot();
    loop {
        match &slot.state {
            State::Empty => return None,
            State::Pending { .. } => {
                slot.state = State::Empty;
                return None;
            }
            State::Preparing { cancel, .. } => {
                cancel.store(true, SeqCst);
                slot = CHANGED.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
            State::Ready(_) => break,
        }
    }
    let State::Ready(spare) = std::mem::replace(&mut slot.state, State::Empty) else {
        unreachable!("the loop leaves only at a ready spare");
    };
    drop(slot);
    if spare.ty != TypeId::of::<T>() || spare.len != len {
        return None;
    }
    spare.vec.downcast::<Vec<MaybeUninit<T>>>().ok().map(|v| *v)
}

/// Called after a product has filled a fresh result of `len` elements of `T`: when the one
/// before it was of the same type and length (a loop) and no product comes within
/// [`SPARE_DELAY`], the next result's memory is allocated and its pages faulted in on a
/// background thread, for the next product of that size to take. Only results of [`SPARE_MIN_BYTES`] to [`SPARE_MAX_BYTES`] get one; at most
/// one spare exists, and [`trim_spare`] frees it.
pub(crate) fn result_filled<T: Element>(len: usize) {
    if !*SPARE_ON || !spare_sized::<T>(len) {
        return;
    }
    let key = (TypeId::of::<T>(), len);
    let mut slot = lock_slot();
    let again = slot.last.replace(key) == Some(key);
    if !again || !matches!(slot.state, State::Empty) {
        return;
    }
    let job = slot.jobs;
    slot.jobs += 1;
    slot.state = State::Pending { job };
    drop(slot);
    let work: Job = Box::new(move || {
        let start = Instant::now() + SPARE_DELAY;
        let mut slot = lock_slot();
        loop {
            if !matches!(slot.state, State::Pending { job: j } if j == job) {
                return; // a product or trim came first
            }
            let now = Instant::now();
            if now >= start {
                break;
            }
            slot = CHANGED
                .wait_timeout(slot, start - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        slot.state = State::Preparing {
            cancel: cancel.clone(),
        };
        drop(slot);
        let made = catch_unwind(AssertUnwindSafe(|| prepare::<T>(len, &cancel))).unwrap_or(None);
        let mut slot = lock_slot();
        // Only this job leaves `Preparing` (products and trim wait for it).
        slot.state = made.map_or(State::Empty, State::Ready);
        CHANGED.notify_all();
    });
    let sent = preparer().is_some_and(|tx| {
        tx.lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(work)
            .is_ok()
    });
    if !sent {
        let mut slot = lock_slot();
        if matches!(slot.state, State::Pending { job: j } if j == job) {
            slot.state = State::Empty;
        }
    }
}

/// The background thread that prepares spares, started on first use.
fn preparer() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static TX: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    let tx = TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("gpu-dot-spare".into())
            .spawn(move || rx.into_iter().for_each(|job| job()))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    tx.as_ref()
}

/// Allocates `len` elements of `T` and faults in their pages on up to [`SPARE_THREADS`]
/// threads, stopping early when `cancel` is set; `None` when the allocation fails.
fn prepare<T: Element>(len: usize, cancel: &AtomicBool) -> Option<Spare> {
    let bytes = len * std::mem::size_of::<T>();
    let mut vec: Vec<MaybeUninit<T>> = Vec::new();
    vec.try_reserve_exact(len).ok()?;
    advise_huge_pages(vec.as_mut_ptr().cast(), bytes);
    // SAFETY: the capacity is at least `len` (reserved above), and MaybeUninit needs no
    // initialisation.
    unsafe { vec.set_len(len) };
    let base = vec.as_mut_ptr() as usize;
    let units = bytes.div_ceil(HUGE_PAGE);
    let next = AtomicUsize::new(0);
    let work = || {
        while !cancel.load(SeqCst) {
            let u = next.fetch_add(1, SeqCst);
            if u >= units {
                break;
            }
            let (start, end) = (
                base + u * HUGE_PAGE,
                (base + (u + 1) * HUGE_PAGE).min(base + bytes),
            );
            let mut at = start;
            while at < end {
                // SAFETY: `at` lies in `vec`'s `bytes` bytes, which this function owns and
                // no one else reads or writes until it returns; the units are disjoint, each
                // claimed by one thread, and a zero byte is a valid `MaybeUninit<T>` byte.
                unsafe { std::ptr::write_volatile(at as *mut u8, 0) };
                at = (at / PAGE + 1) * PAGE;
            }
        }
    };
    let threads = (bytes / SPARE_MIN_BYTES).clamp(1, SPARE_THREADS);
    std::thread::scope(|s| {
        for _ in 1..threads {
            // A thread that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(s, work);
        }
        work();
    });
    Some(Spare {
        ty: TypeId::of::<T>(),
        len,
        bytes,
        vec: Box::new(vec),
    })
}

/// Frees the spare result, stopping its preparation first, and forgets the last size, so that
/// none is prepared until a size repeats again.
pub(crate) fn trim_spare() {
    let mut slot = lock_slot();
    while let State::Preparing { cancel, .. } = &slot.state {
        cancel.store(true, SeqCst);
        slot = CHANGED.wait(slot).unwrap_or_else(|p| p.into_inner());
    }
    let old = std::mem::replace(&mut slot.state, State::Empty);
    slot.last = None;
    drop(slot);
    drop(old);
}

/// Bytes of host memory the spare result keeps (0 without one, or while it is prepared).
pub(crate) fn spare_bytes() -> usize {
    match &lock_slot().state {
        State::Ready(s) => s.bytes,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spare is one per process: its tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    fn turn() -> MutexGuard<'static, ()> {
        let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
        trim_spare();
        guard
    }

    /// Waits until the background thread has finished (a spare is ready or none is made).
    fn settled() -> usize {
        let start = Instant::now();
        loop {
            if !matches!(
                lock_slot().state,
                State::Pending { .. } | State::Preparing { .. }
            ) {
                return spare_bytes();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the spare never settled"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    const LEN: usize = (SPARE_MIN_BYTES + 3 * HUGE_PAGE + 12_345) / 4;

    #[test]
    fn a_size_asked_twice_in_a_row_gets_a_spare_and_the_next_result_takes_it() {
        let _turn = turn();
        result_filled::<f32>(LEN);
        assert_eq!(settled(), 0, "one result of a size is no loop");
        result_filled::<f32>(LEN);
        assert_eq!(settled(), LEN * 4, "the second asks for a spare");
        let v = fresh_vec::<f32>((LEN, 1)).unwrap();
        assert_eq!(v.len(), LEN);
        assert_eq!(spare_bytes(), 0, "the result took the spare");
        // Its pages were written (zeros at the start of each 4 KiB page).
        let base = v.as_ptr() as usize;
        let first_page = base.next_multiple_of(PAGE);
        // SAFETY: `first_page` lies inside `v` (which is larger than a page), and the
        // preparation wrote a zero byte there.
        assert_eq!(unsafe { *(first_page as *const u8) }, 0);
        // The next fresh result of that size, with no spare, is new memory.
        let w = fresh_vec::<f32>((LEN, 1)).unwrap();
        assert_eq!(w.len(), LEN);
        assert_ne!(w.as_ptr(), v.as_ptr());
    }

    #[test]
    fn a_spare_of_another_size_or_type_is_freed_not_handed_out() {
        let _turn = turn();
        result_filled::<f32>(LEN);
        result_filled::<f32>(LEN);
        assert_eq!(settled(), LEN * 4);
        assert!(take_spare::<f32>(LEN - 1).is_none());
        assert_eq!(spare_bytes(), 0, "a spare of the wrong size is freed");
        result_filled::<f32>(LEN);
        assert_eq!(settled(), LEN * 4, "the size repeated once more");
        assert!(
            take_spare::<f64>(LEN / 2).is_none(),
            "same bytes, another type"
        );
        assert_eq!(spare_bytes(), 0);
    }

    #[test]
    fn a_product_right_after_another_finds_no_spare_begun() {
        let _turn = turn();
        result_filled::<f32>(LEN);
        result_filled::<f32>(LEN);
        // At once (well within the delay): nothing was allocated, and none will be.
        assert!(take_spare::<f32>(LEN).is_none());
        std::thread::sleep(SPARE_DELAY * 4);
        assert_eq!(settled(), 0, "the pending spare was dropped");
    }

    #[test]
    fn a_result_takes_the_spare_while_it_is_prepared() {
        let _turn = turn();
        let len = SPARE_MAX_BYTES / 8;
        result_filled::<f64>(len);
        result_filled::<f64>(len);
        // Once the delay is over the preparation runs (256 MiB take a while): it is stopped
        // and the result is the spare as far as it got, of the right length.
        let start = Instant::now();
        while matches!(lock_slot().state, State::Pending { .. }) {
            assert!(start.elapsed() < Duration::from_secs(20), "never started");
            std::thread::yield_now();
        }
        let v = take_spare::<f64>(len).expect("the spare, ready or stopped");
        assert_eq!(v.len(), len);
        assert_eq!(settled(), 0);
    }

    #[test]
    fn trim_frees_the_spare_and_forgets_the_size() {
        let _turn = turn();
        result_filled::<f32>(LEN);
        result_filled::<f32>(LEN);
        trim_spare();
        assert_eq!(spare_bytes(), 0);
        result_filled::<f32>(LEN);
        assert_eq!(settled(), 0, "after trim a size must repeat again");
        result_filled::<f32>(LEN);
        assert_eq!(settled(), LEN * 4);
        trim_spare();
        assert_eq!(spare_bytes(), 0);
    }

    #[test]
    fn sizes_outside_the_range_get_no_spare() {
        let _turn = turn();
        for len in [SPARE_MIN_BYTES / 4 - 1, SPARE_MAX_BYTES / 4 + 1] {
            result_filled::<f32>(len);
            result_filled::<f32>(len);
            assert_eq!(settled(), 0, "{len} elements");
        }
    }
}
