//! A simulated device for testing the conductor without a GPU: "device memory" is host
//! memory, each lane is a queue of operations that run later, in order, a few at a time, at
//! random (as streams run asynchronously), and marks complete when the operations before them
//! have run. A run through it exercises the real schedule, board, crew and conductor: a copy
//! issued before its staging is packed, a slot reused before its copy ran, a kernel run before
//! its inputs landed or a result unpacked before it arrived all give wrong numbers.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};

use super::link::{Lane, Link, Mark};
use crate::error::GpuDotError;

enum Op {
    Copy {
        dst: usize,
        src: usize,
        bytes: usize,
    },
    Record(Mark, u64),
    Wait(Mark, u64),
    Run(Box<dyn FnOnce()>),
}

struct State {
    lanes: [VecDeque<Op>; 3],
    /// Per mark: the generation of its latest record, and the latest one completed.
    recorded: HashMap<Mark, u64>,
    completed: HashMap<Mark, u64>,
    generation: u64,
    rng: u64,
}

/// The simulated streams of one run.
pub(crate) struct SimLink {
    separate: bool,
    state: RefCell<State>,
    /// Copies enqueued on the up lane so far, and for each panel's inputs mark recorded, the
    /// panel and how many there were then.
    up_copies: std::cell::Cell<usize>,
    inputs_marks: RefCell<Vec<(usize, usize)>>,
}

impl SimLink {
    pub(crate) fn new(separate: bool, seed: u64) -> SimLink {
        SimLink {
            separate,
            state: RefCell::new(State {
                lanes: Default::default(),
                recorded: HashMap::new(),
                completed: HashMap::new(),
                generation: 0,
                rng: seed | 1,
            }),
            up_copies: std::cell::Cell::new(0),
            inputs_marks: RefCell::new(Vec::new()),
        }
    }

    /// Copies enqueued on the up lane so far.
    pub(crate) fn up_copies(&self) -> usize {
        self.up_copies.get()
    }

    /// For each panel's inputs mark recorded, the panel and the up copies enqueued before it.
    pub(crate) fn inputs_marks(&self) -> Vec<(usize, usize)> {
        self.inputs_marks.borrow().clone()
    }

    fn lane(&self, lane: Lane) -> usize {
        match (self.separate, lane) {
            (false, _) | (true, Lane::Compute) => 1,
            (true, Lane::Up) => 0,
            (true, Lane::Down) => 2,
        }
    }

    /// Enqueues a kernel (any host closure) on the compute lane.
    pub(crate) fn enqueue(&self, kernel: impl FnOnce() + 'static) {
        let lane = self.lane(Lane::Compute);
        self.state.borrow_mut().lanes[lane].push_back(Op::Run(Box::new(kernel)));
    }

    fn push(&self, lane: Lane, op: Op) {
        let lane = self.lane(lane);
        self.state.borrow_mut().lanes[lane].push_back(op);
    }

    /// Runs up to `steps` operations, each from a random lane whose next operation may run.
    /// Returns whether any ran.
    fn progress(&self, steps: usize) -> bool {
        let mut any = false;
        for _ in 0..steps {
            let mut st = self.state.borrow_mut();
            let runnable: Vec<usize> = (0..3)
                .filter(|&l| match st.lanes[l].front() {
                    None => false,
                    Some(Op::Wait(mark, gen)) => {
                        st.completed.get(mark).copied().unwrap_or(0) >= *gen
                    }
                    Some(_) => true,
                })
                .collect();
            if runnable.is_empty() {
                break;
            }
            st.rng ^= st.rng << 13;
            st.rng ^= st.rng >> 7;
            st.rng ^= st.rng << 17;
            let lane = runnable[(st.rng % runnable.len() as u64) as usize];
            let op = st.lanes[lane].pop_front().expect("runnable");
            match op {
                Op::Copy { dst, src, bytes } => {
                    // SAFETY: the conductor's contract for copies (see `Link`): both ranges
                    // are valid for `bytes` bytes while the copy is pending.
                    unsafe {
                        std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes)
                    }
                }
                Op::Record(mark, gen) => {
                    st.completed.insert(mark, gen);
                }
                Op::Wait(..) => {}
                Op::Run(kernel) => {
                    drop(st);
                    kernel();
                }
            }
            any = true;
        }
        any
    }

    fn random_steps(&self) -> usize {
        let mut st = self.state.borrow_mut();
        st.rng ^= st.rng << 13;
        st.rng ^= st.rng >> 7;
        st.rng ^= st.rng << 17;
        (st.rng % 3) as usize
    }
}

impl Link for SimLink {
    fn separate(&self) -> bool {
        self.separate
    }

    unsafe fn copy_up(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), GpuDotError> {
        self.up_copies.set(self.up_copies.get() + 1);
        self.push(
            Lane::Up,
            Op::Copy {
                dst: dst as usize,
                src: src as usize,
                bytes,
            },
        );
        Ok(())
    }

    unsafe fn copy_down(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), GpuDotError> {
        self.push(
            Lane::Down,
            Op::Copy {
                dst: dst as usize,
                src: src as usize,
                bytes,
            },
        );
        Ok(())
    }

    fn record(&self, mark: Mark, lane: Lane) -> Result<(), GpuDotError> {
        if let (Mark::Inputs(i), Lane::Up) = (mark, lane) {
            self.inputs_marks
                .borrow_mut()
                .push((i, self.up_copies.get()));
        }
        let gen = {
            let mut st = self.state.borrow_mut();
            st.generation += 1;
            let gen = st.generation;
            st.recorded.insert(mark, gen);
            gen
        };
        self.push(lane, Op::Record(mark, gen));
        Ok(())
    }

    fn wait(&self, lane: Lane, mark: Mark) -> Result<(), GpuDotError> {
        let gen = self
            .state
            .borrow()
            .recorded
            .get(&mark)
            .copied()
            .unwrap_or(0);
        self.push(lane, Op::Wait(mark, gen));
        Ok(())
    }

    fn landed(&self, mark: Mark) -> Result<bool, GpuDotError> {
        self.progress(self.random_steps());
        let st = self.state.borrow();
        let recorded = st.recorded.get(&mark).copied().unwrap_or(0);
        Ok(st.completed.get(&mark).copied().unwrap_or(0) >= recorded)
    }

    fn block(&self, mark: Mark) -> Result<(), GpuDotError> {
        loop {
            {
                let st = self.state.borrow();
                let recorded = st.recorded.get(&mark).copied().unwrap_or(0);
                if st.completed.get(&mark).copied().unwrap_or(0) >= recorded {
                    return Ok(());
                }
            }
            assert!(
                self.progress(1),
                "the simulated streams deadlocked while waiting for {mark:?}"
            );
        }
    }

    fn drain(&self) -> Result<(), GpuDotError> {
        while self.progress(64) {}
        let st = self.state.borrow();
        assert!(
            st.lanes.iter().all(VecDeque::is_empty),
            "the simulated streams deadlocked: a wait on a mark never recorded after it"
        );
        Ok(())
    }
}
