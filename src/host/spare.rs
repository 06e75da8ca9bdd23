//! The spare result: the next result of a loop of products, allocated ahead and its pages
//! faulted in by whoever has time.
//!
//! A fresh result of 32 MiB or more is memory new to the process, and the kernel zeroes each
//! of its pages on the product's first write: at 10–35 GB/s, as long as the copies that bring
//! the result down. When a product asks for a fresh result of the same element type and
//! length as the product before it (a loop), the next result is allocated at once, beside its
//! own, and its pages are faulted in by the product's helpers when they have nothing else to
//! do (between packing the operands and the results' landing), then, 1 ms after the product
//! (a loop that calls again sooner is not competed with), by a background thread. The next
//! product of that size takes it, as far as it got.
//!
//! One spare at most, of 32 to 256 MiB, is kept; [`trim`] (the crate's `trim`) frees it,
//! [`bytes`] reports it, and `GPU_DOT_SPARE_RESULT=0` turns it off.

use std::any::{Any, TypeId};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use once_cell::sync::Lazy;

use super::pages::{self, HUGE_PAGE};
use crate::element::Element;
use crate::error::GpuDotError;

/// Results of fewer bytes get no spare: the allocator keeps freed blocks of that size (glibc
/// reuses freed memory below its mmap threshold, which grows to 32 MiB), so their pages
/// usually exist already.
pub(crate) const MIN_BYTES: usize = 32 << 20;
/// Results of more bytes get no spare: what the spare keeps between calls stays below this
/// (256 MiB: an `f32` 8192² or `f64` 8192 × 4096 result).
pub(crate) const MAX_BYTES: usize = 256 << 20;
/// Most threads faulting in a spare's pages at once (helpers and the background thread's).
const THREADS: usize = 4;
/// How long after a product the background thread waits before it faults in what is left: a
/// loop that calls again sooner (products back to back) takes the spare as it is, and the two
/// never compete for the memory bus.
const DELAY: Duration = Duration::from_millis(1);

/// `GPU_DOT_SPARE_RESULT`: whether loops of large products get their next result's memory
/// ready ahead (on unless switched off; any other value is ignored, with a warning).
static ON: Lazy<bool> = Lazy::new(|| {
    let Ok(value) = std::env::var(crate::settings::SPARE_RESULT.name) else {
        return true;
    };
    parse_spare(&value).unwrap_or_else(|e| {
        log::warn!("{e}; the spare result stays on");
        true
    })
});

/// A value of `GPU_DOT_SPARE_RESULT`: an on/off switch.
pub(crate) fn parse_spare(value: &str) -> Result<bool, GpuDotError> {
    crate::settings::SPARE_RESULT.switch(value)
}

/// Faulting in a spare's pages, a huge page's worth (2 MiB) at a time, by any thread that
/// has time, until the spare is taken.
pub(crate) struct Prefault {
    base: usize,
    bytes: usize,
    units: usize,
    /// The next unit to claim.
    next: AtomicUsize,
    /// Units faulted in.
    done: AtomicUsize,
    /// Threads inside [`Prefault::step`].
    busy: AtomicUsize,
    /// Set when the spare is taken or freed: no step starts after it.
    stop: AtomicBool,
}

impl Prefault {
    fn new(base: usize, bytes: usize) -> Prefault {
        Prefault {
            base,
            bytes,
            units: bytes.div_ceil(HUGE_PAGE),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Faults in the next unit, unless none is left, the spare is being taken, or
    /// [`THREADS`] threads are at it already; whether it did.
    pub(crate) fn step(&self) -> bool {
        if self.stop.load(SeqCst) || self.next.load(SeqCst) >= self.units {
            return false;
        }
        // Announce, then look at `stop` again: `halt` sets `stop` and then waits for `busy`,
        // so either it sees this step or this step sees it.
        if self.busy.fetch_add(1, SeqCst) >= THREADS || self.stop.load(SeqCst) {
            self.busy.fetch_sub(1, SeqCst);
            return false;
        }
        let unit = self.next.fetch_add(1, SeqCst);
        let worked = unit < self.units;
        if worked {
            let start = self.base + unit * HUGE_PAGE;
            let end = (start + HUGE_PAGE).min(self.base + self.bytes);
            // SAFETY: [start, end) lies in the spare's allocation (`base`, `bytes`), which is
            // freed or handed out only after `halt` has seen `busy` at 0, and this step
            // counts in `busy`; the unit is this step's alone (claimed above), no one else
            // uses the spare meanwhile, and a zero byte is a valid `MaybeUninit<T>` byte.
            unsafe { pages::touch_pages(start, end) };
            self.done.fetch_add(1, SeqCst);
        }
        self.busy.fetch_sub(1, SeqCst);
        worked
    }

    /// Whether every unit is faulted in.
    fn complete(&self) -> bool {
        self.done.load(SeqCst) >= self.units
    }

    /// Stops every step and waits for those under way (each at most one unit).
    fn halt(&self) {
        self.stop.store(true, SeqCst);
        while self.busy.load(SeqCst) > 0 {
            std::thread::yield_now();
        }
    }
}

/// The next result: `len` elements of the type `ty`, and its faulting in.
struct Spare {
    ty: TypeId,
    len: usize,
    bytes: usize,
    /// A `Vec<MaybeUninit<T>>` of `len` elements, `T` the element type `ty`.
    vec: Box<dyn Any + Send>,
    fault: Arc<Prefault>,
}

struct Slot {
    spare: Option<Spare>,
    /// The element type and length of the last fresh result of spare size: the same again
    /// makes a spare.
    last: Option<(TypeId, usize)>,
}

/// The one spare of the process.
static SLOT: Mutex<Slot> = Mutex::new(Slot {
    spare: None,
    last: None,
});

fn lock() -> MutexGuard<'static, Slot> {
    // Every change replaces whole fields under the lock, so a panic elsewhere leaves it valid.
    SLOT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a result of `len` elements of `T` is of a size that gets a spare.
fn sized<T: Element>(len: usize) -> bool {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    (MIN_BYTES..=MAX_BYTES).contains(&bytes)
}

/// The spare, if it is `len` elements of `T`, its pages faulted in as far as they got (the
/// product's own touching does the rest). A spare of another size or type is freed, so that
/// it does not stay beside the new result; one for a result too small to get a spare stays.
pub(crate) fn take<T: Element>(len: usize) -> Option<Vec<MaybeUninit<T>>> {
    if !*ON || !sized::<T>(len) {
        return None;
    }
    let spare = lock().spare.take()?;
    spare.fault.halt();
    if spare.ty != TypeId::of::<T>() || spare.len != len {
        return None;
    }
    spare.vec.downcast::<Vec<MaybeUninit<T>>>().ok().map(|v| *v)
}

/// Called when a product asks for a fresh result of `len` elements of `T` (after [`take`]):
/// when the one before asked for the same type and length, the next one is allocated now,
/// for the product's helpers ([`lend`]) and the background thread ([`product_done`]) to
/// fault in. A failed allocation makes no spare.
pub(crate) fn expect<T: Element>(len: usize) {
    if !*ON || !sized::<T>(len) {
        return;
    }
    let key = (TypeId::of::<T>(), len);
    let mut slot = lock();
    let again = slot.last.replace(key) == Some(key);
    if !again || slot.spare.is_some() {
        return;
    }
    let bytes = len * std::mem::size_of::<T>();
    let Ok(mut vec) = pages::alloc_vec::<T>(len, bytes) else {
        return;
    };
    let fault = Arc::new(Prefault::new(vec.as_mut_ptr() as usize, bytes));
    slot.spare = Some(Spare {
        ty: TypeId::of::<T>(),
        len,
        bytes,
        vec: Box::new(vec),
        fault,
    });
}

/// The faulting in of the spare, while pages of it are left: for a product's helpers to step
/// when they have nothing else to do.
pub(crate) fn lend() -> Option<Arc<Prefault>> {
    let slot = lock();
    let spare = slot.spare.as_ref()?;
    (!spare.fault.complete()).then(|| spare.fault.clone())
}

type Job = Box<dyn FnOnce() + Send>;

/// Called when a product has finished: what is left of the spare is faulted in by a
/// background thread, [`DELAY`] later, on up to [`THREADS`] threads, unless a product takes
/// the spare first.
pub(crate) fn product_done() {
    let Some(fault) = lend() else {
        return;
    };
    let job: Job = Box::new(move || {
        std::thread::sleep(DELAY);
        let work = || loop {
            if fault.step() {
                continue;
            }
            if fault.stop.load(SeqCst) || fault.next.load(SeqCst) >= fault.units {
                return;
            }
            // Helpers of a product hold the other places; wait for one.
            std::thread::yield_now();
        };
        let threads = (fault.bytes / MIN_BYTES).clamp(1, THREADS);
        // A panic (a thread that cannot start) leaves the rest to the next product.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                for _ in 1..threads {
                    s.spawn(work);
                }
                work();
            })
        }));
    });
    if let Some(tx) = background() {
        // A closed channel (the thread is gone) leaves the rest to the next product.
        let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(job);
    }
}

/// The background thread, started on first use; `None` if it could not start.
fn background() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static TX: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("gpu-dot-spare".into())
            .spawn(move || rx.into_iter().for_each(|job| job()))
            .ok()
            .map(|_| Mutex::new(tx))
    })
    .as_ref()
}

/// Frees the spare result (after stopping its faulting in) and forgets the last size, so
/// that none is made until a size repeats again.
pub(crate) fn trim() {
    let spare = {
        let mut slot = lock();
        slot.last = None;
        slot.spare.take()
    };
    if let Some(spare) = spare {
        spare.fault.halt();
    }
}

/// Bytes of host memory the spare result keeps (0 without one).
pub(crate) fn bytes() -> usize {
    lock().spare.as_ref().map_or(0, |s| s.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// The spare is one per process: its tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    fn turn() -> MutexGuard<'static, ()> {
        let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
        trim();
        guard
    }

    /// A fresh result as a product asks for it.
    fn fresh(len: usize) -> Vec<MaybeUninit<f32>> {
        crate::host::fresh::fresh_vec::<f32>((len, 1)).unwrap()
    }

    /// The spare's faulting in, its base address and whether it is complete.
    fn state() -> Option<(Arc<Prefault>, usize, bool)> {
        let slot = lock();
        let s = slot.spare.as_ref()?;
        Some((s.fault.clone(), s.fault.base, s.fault.complete()))
    }

    /// Waits until the spare's pages are all faulted in.
    fn completed() {
        let start = Instant::now();
        while !state().expect("a spare").2 {
            assert!(start.elapsed() < Duration::from_secs(20), "never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    const LEN: usize = (MIN_BYTES + 3 * HUGE_PAGE + 12_345) / 4;

    #[test]
    fn a_size_asked_twice_in_a_row_gets_a_spare_and_the_next_result_takes_it() {
        let _turn = turn();
        let first = fresh(LEN);
        assert_eq!(bytes(), 0, "one result of a size is no loop");
        let second = fresh(LEN);
        assert_eq!(bytes(), LEN * 4, "the second makes a spare at once");
        product_done();
        completed();
        let (fault, base, _) = state().unwrap();
        assert_eq!(fault.done.load(SeqCst), fault.units);
        let third = fresh(LEN);
        assert_eq!(third.len(), LEN);
        assert_eq!(
            third.as_ptr() as usize,
            base,
            "the third result is the spare"
        );
        assert!(!fault.step(), "a taken spare is not touched again");
        for (i, v) in [&first, &second].into_iter().enumerate() {
            assert_ne!(v.as_ptr(), third.as_ptr(), "result {i}");
        }
        // The third asked for the size again: the next spare exists already.
        assert_eq!(bytes(), LEN * 4);
        trim();
        assert_eq!(bytes(), 0);
    }

    #[test]
    fn helpers_fault_in_the_lent_spare_until_it_is_taken() {
        let _turn = turn();
        drop((fresh(LEN), fresh(LEN)));
        let fault = lend().expect("a spare to fault in");
        assert!(fault.step(), "a first unit");
        assert_eq!(fault.done.load(SeqCst), 1);
        let taken = take::<f32>(LEN).expect("the spare");
        assert_eq!(taken.len(), LEN);
        assert!(!fault.step(), "no step after the spare is taken");
        assert!(lend().is_none());
        assert_eq!(bytes(), 0);
    }

    #[test]
    fn a_spare_of_another_size_or_type_is_freed_not_handed_out() {
        let _turn = turn();
        drop((fresh(LEN), fresh(LEN)));
        assert!(take::<f32>(LEN - 1).is_none());
        assert_eq!(bytes(), 0, "a spare of the wrong size is freed");
        drop(fresh(LEN));
        assert_eq!(bytes(), LEN * 4, "the size repeated once more");
        assert!(take::<f64>(LEN / 2).is_none(), "same bytes, another type");
        assert_eq!(bytes(), 0);
        // A result too small for a spare leaves it alone.
        drop(fresh(LEN));
        assert!(take::<f32>(1000).is_none());
        assert_eq!(bytes(), LEN * 4);
    }

    #[test]
    fn a_product_takes_the_spare_while_the_background_faults_it_in() {
        let _turn = turn();
        let len = MAX_BYTES / 4;
        drop((fresh(len), fresh(len)));
        product_done();
        std::thread::sleep(DELAY * 2);
        let v = take::<f32>(len).expect("the spare, as far as it got");
        assert_eq!(v.len(), len);
        assert_eq!(bytes(), 0);
    }

    #[test]
    fn trim_frees_the_spare_and_forgets_the_size() {
        let _turn = turn();
        drop((fresh(LEN), fresh(LEN)));
        product_done();
        trim();
        assert_eq!(bytes(), 0);
        drop(fresh(LEN));
        assert_eq!(bytes(), 0, "after trim a size must repeat again");
        drop(fresh(LEN));
        assert_eq!(bytes(), LEN * 4);
        trim();
        assert_eq!(bytes(), 0);
    }

    #[test]
    fn sizes_outside_the_range_get_no_spare() {
        let _turn = turn();
        for len in [MIN_BYTES / 4 - 1, MAX_BYTES / 4 + 1] {
            drop((fresh(len), fresh(len), fresh(len)));
            assert_eq!(bytes(), 0, "{len} elements");
        }
    }
}
