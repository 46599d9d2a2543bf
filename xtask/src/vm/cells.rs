//! Scheduling: the cells (one qemu boot each: a kernel with a backend, running the
//! test modules of `VM_PER_BACKEND`, or its `lab` cell, running those of `VM_ONCE`) planned
//! longest first, and run `--jobs` guests at a time.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use super::binaries::{TestModule, VM_ONCE};
use super::kernels::{Kernel, Refusal};

/// The cell that runs `VM_ONCE` (and `doctor`) on each kernel.
pub(super) const ONCE_CELL: &str = "lab";

/// One qemu boot: a kernel with a backend (the scenario modules) or with `lab`.
#[derive(Clone, Debug)]
pub(super) struct Cell {
    pub(super) kernel: String,
    /// A backend name, or [`ONCE_CELL`].
    pub(super) name: String,
    /// The test modules and the tests of each this cell runs.
    pub(super) runs: Vec<(TestModule, Vec<String>)>,
    /// A backend this kernel cannot load: the cell checks the refusal instead of tests.
    pub(super) refused: Option<&'static Refusal>,
}

impl Cell {
    pub(super) fn backend(&self) -> Option<&str> {
        (self.name != ONCE_CELL).then_some(self.name.as_str())
    }

    pub(super) fn test_count(&self) -> usize {
        self.runs.iter().map(|(_, t)| t.len()).sum()
    }

    pub(super) fn label(&self) -> String {
        format!("{} {}", self.kernel, self.name)
    }
}

pub(super) fn plan(
    kernels: &[Kernel],
    listed: &[(TestModule, Vec<String>)],
    backends: &[String],
) -> Vec<Cell> {
    let mut cells = Vec::new();
    for k in kernels {
        let pick = |once: bool| -> Vec<(TestModule, Vec<String>)> {
            listed
                .iter()
                .filter(|(b, t)| !t.is_empty() && VM_ONCE.contains(&b.name.as_str()) == once)
                .cloned()
                .collect()
        };
        for be in backends {
            let refused = k.refusal(be);
            let runs = if refused.is_some() { Vec::new() } else { pick(false) };
            cells.push(Cell { kernel: k.short.clone(), name: be.clone(), runs, refused });
        }
        cells.push(Cell { kernel: k.short.clone(), name: ONCE_CELL.into(), runs: pick(true), refused: None });
    }
    cells.retain(|c| c.test_count() > 0 || c.refused.is_some());
    cells
}

/// Longest first, so the last guest to finish is a short one: by test count, weighted with
/// how long a test takes on the kernel's architecture.
pub(super) fn schedule(cells: &mut [Cell], kernels: &[Kernel]) {
    let weight = |c: &Cell| {
        let arch = kernels.iter().find(|k| k.short == c.kernel).map_or(100, |k| k.arch.test_time_percent);
        c.test_count() as u64 * u64::from(arch)
    };
    cells.sort_by_key(|c| std::cmp::Reverse(weight(c)));
}

/// Runs every cell, `jobs` at once, with `run` (one qemu boot each); results in the order
/// of `cells`.
pub(super) fn run_cells<T: Default + Send>(
    cells: &[Cell],
    jobs: usize,
    run: impl Fn(&Cell) -> T + Sync,
) -> Vec<T> {
    let queue = Mutex::new((0..cells.len()).collect::<VecDeque<usize>>());
    let done = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let Some(i) = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None) else { return };
                let result = run(&cells[i]);
                if let Ok(mut d) = done.lock() {
                    d.insert(i, result);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_default();
    (0..cells.len()).map(|i| done.remove(&i).unwrap_or_default()).collect()
}
