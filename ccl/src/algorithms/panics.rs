//! A test-only algorithm whose kernel panics while it is traced: the sweep
//! must record the panic as that point's error and go on. Compiled only with
//! the `test-algorithms` feature (on for the project's own tests).

use crate::cost::CostTerms;
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::Tables;

pub struct Panics;

fn kernel(_tl: &mut Tl, _args: &KernelArgs) {
    panic!("test-only algorithm 'panics' panicked on purpose");
}

impl Algorithm for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn summary(&self) -> &'static str {
        "test only: its kernel panics"
    }
    fn collectives(&self) -> &'static [Collective] {
        &Collective::ALL
    }
    fn wiring(&self, _g: &Group, _q: &QueueConfig) -> Tables {
        Vec::new()
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Never runs far enough to cost anything; priced as a ring.
        CostTerms::unrolled_blocks(g, c, bytes)
    }
}
