//! Deliberately wrong all-reduces, for the mutation test (tests/it/mutants.rs):
//! verification must catch each one, naming the first wrong element.
//! Compiled only with the `test-algorithms` feature.
//!
//! Each is a plain ring all-reduce over participants in index order (block
//! `k` of `n`, reduce-scatter step `s` sends block `p − s` east and combines
//! block `p − s − 1` from the west, so `p` ends with block `p + 1`; then an
//! all-gather), with one plausible bug:
//!
//! - `mutant_skip_step`: the last reduce-scatter step takes the received
//!   block as it is (an off-by-one that treats it as the first all-gather
//!   step), so block `b` misses participant `b − 1`'s contribution;
//! - `mutant_wrong_block`: step 0 sends block `p + 1` where block `p` is
//!   due, so block `b` holds participant `b`'s block `b + 1` in place of
//!   its block `b` (of another length when blocks differ: the queue
//!   refuses that before any value is checked);
//! - `mutant_double_count`: the holder of each block combines its own
//!   contribution in again after the last step, so it counts twice — which
//!   max and min cannot see (`x ∘ x = x`), sum can.

use super::primitives::{cycle_wiring, me};
use crate::cost::CostTerms;
use crate::kernels::{Atom, Buffer, combine};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Index, Tl};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

/// The bug a mutant carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    SkipStep,
    WrongBlock,
    DoubleCount,
}

/// The ring all-reduce with `bug`.
fn ring_all_reduce(tl: &mut Tl, a: &KernelArgs, bug: Bug) {
    let n = a.group.size();
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let op = a.job.op;
    let mut buf = Buffer::new(a.buffer(tl), a.job.elems, &[n]);
    let block = |k: usize| Atom(vec![Index::from(k % n)]);
    buf.load(tl, &buf.atoms(&[]));
    let first = if bug == Bug::WrongBlock { p + 1 } else { p };
    tl.send(QDir::E, buf.tile(&block(first)));
    for s in 0..n - 1 {
        let b = block(p + 2 * n - s - 1);
        let last = s + 2 == n;
        let mine = buf.tile(&b);
        if last && bug == Bug::SkipStep {
            buf.recv_replace(tl, &b, QDir::W, None);
            continue;
        }
        buf.recv_combine(tl, op, &b, QDir::W, (!last).then_some(QDir::E));
        if last && bug == Bug::DoubleCount {
            let t = combine(tl, op, buf.tile(&b), mine);
            buf.set(&b, t);
        }
    }
    // All-gather: p holds block p + 1; step s passes block p + 1 − s on.
    let own = block(p + 1);
    tl.send(QDir::E, buf.tile(&own));
    buf.store(tl, std::slice::from_ref(&own));
    for s in 0..n - 1 {
        let b = block(p + n - s);
        buf.recv_replace(tl, &b, QDir::W, (s + 2 < n).then_some(QDir::E));
        buf.store(tl, std::slice::from_ref(&b));
    }
}

fn skip_step(tl: &mut Tl, a: &KernelArgs) {
    ring_all_reduce(tl, a, Bug::SkipStep);
}

fn wrong_block(tl: &mut Tl, a: &KernelArgs) {
    ring_all_reduce(tl, a, Bug::WrongBlock);
}

fn double_count(tl: &mut Tl, a: &KernelArgs) {
    ring_all_reduce(tl, a, Bug::DoubleCount);
}

/// A registered mutant: its name and kernel.
pub struct Mutant(&'static str, fn(&mut Tl, &KernelArgs));

pub static SKIP_STEP: Mutant = Mutant("mutant_skip_step", skip_step);
pub static WRONG_BLOCK: Mutant = Mutant("mutant_wrong_block", wrong_block);
pub static DOUBLE_COUNT: Mutant = Mutant("mutant_double_count", double_count);

impl Algorithm for Mutant {
    fn name(&self) -> &'static str {
        self.0
    }
    fn summary(&self) -> &'static str {
        "test only: a ring all-reduce with a deliberate bug"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[Collective::AllReduce]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        cycle_wiring(g, q, &[(0..g.size()).collect()])
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        self.1
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // As a ring all-reduce in index order.
        CostTerms::unrolled_blocks(g, c, bytes)
    }
}
