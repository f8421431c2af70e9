//! The mutation test: deliberately wrong all-reduces (src/ccl/algorithms/
//! mutants.rs, test-only) fail verification at exactly the element a model
//! of their bug predicts, for sum, max and min; the correct ring passes on
//! the same inputs. A verification that could be fooled would let one pass.

use crate::common;
use common::system;
use half::f16;
use kernbench::ccl::kernels::split;
use kernbench::ccl::verify::value;
use kernbench::ccl::{Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

/// What a mutant's all-reduce leaves at element `i` (every participant
/// alike): the bug applied to the ring of mutants.rs, whose block `b` is
/// reduced along participants `b, b + 1, …` and held by `b − 1`.
fn mutant_output(mutant: &str, op: ReduceOp, n: usize, elems: usize, i: usize) -> f32 {
    let blocks = split(elems, n);
    let b = blocks
        .iter()
        .position(|&(o, l)| o <= i && i < o + l)
        .expect("every element is in a block");
    let holder = (b + n - 1) % n;
    let fold = |skip: Option<usize>, x: &dyn Fn(usize) -> f32| -> f32 {
        (0..n)
            .filter(|&q| Some(q) != skip)
            .map(x)
            .reduce(|a, v| op.apply(a, v))
            .expect("n > 1")
    };
    match mutant {
        // The holder's own contribution never joins.
        "mutant_skip_step" => fold(Some(holder), &|q| value(q, i)),
        // Participant b gave its value one block further on (equal blocks).
        "mutant_wrong_block" => {
            let shifted = (i + elems / n) % elems;
            fold(None, &|q| value(q, if q == b { shifted } else { i }))
        }
        // The holder's contribution joins twice.
        "mutant_double_count" => op.apply(fold(None, &|q| value(q, i)), value(holder, i)),
        _ => unreachable!("a mutant of this test"),
    }
}

fn reference(op: ReduceOp, n: usize, i: usize) -> f32 {
    (1..n).fold(value(0, i), |a, q| op.apply(a, value(q, i)))
}

fn systems() -> Vec<(&'static str, System)> {
    let sips = |n: u32, topology, grid: Option<(u32, u32)>, cubes: (u32, u32)| {
        system(|s| {
            s.system.sips.count = n;
            s.system.sips.topology = topology;
            (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
            (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
        })
    };
    vec![
        ("2 SIPs ring", sips(2, SipTopology::Ring1d, None, (1, 1))),
        ("5 SIPs ring", sips(5, SipTopology::Ring1d, None, (1, 1))),
        (
            "3x2 torus",
            sips(6, SipTopology::Torus2d, Some((3, 2)), (1, 1)),
        ),
        (
            "1 SIP of 2x2 cubes",
            sips(1, SipTopology::Ring1d, None, (2, 2)),
        ),
    ]
}

/// Each mutant × op × system × size fails at the element its model says,
/// with a message naming it; double counting passes under max and min,
/// which are idempotent, and only there. Blocks of different lengths make
/// `mutant_wrong_block` send a block its receiver does not expect: the
/// queue refuses it before any value is checked.
#[test]
fn every_mutant_fails_verification_at_its_first_wrong_element() {
    let mut checked = 0;
    for (label, sys) in systems() {
        let (mut rm, ring) = common::communicator(
            &sys,
            &common::algo_config("ring", Space::Tcm, 1),
            DataMode::Functional,
        )
        .unwrap();
        let n = ring.group.size();
        for mutant in [
            "mutant_skip_step",
            "mutant_wrong_block",
            "mutant_double_count",
        ] {
            let cfg = common::algo_config(mutant, Space::Tcm, 1);
            for (elems, op) in [12 * n, 131]
                .into_iter()
                .flat_map(|e| OPS.map(|op| (e, op)))
            {
                let what = format!("{mutant} {op:?} on {label}, {elems} elements");
                let job = Job {
                    collective: Collective::AllReduce,
                    op,
                    elems,
                };
                // The control: the correct ring on the same inputs.
                assert_eq!(
                    ring.run(&mut rm, job).unwrap().verified,
                    Some(true),
                    "{what}"
                );
                assert_eq!(ring.first_mismatch(&rm, &job), None, "{what}");
                // A machine of its own: a refused run leaves queues half full.
                let (mut m, c) = common::communicator(&sys, &cfg, DataMode::Functional).unwrap();
                let run = c.run(&mut m, job);
                if mutant == "mutant_wrong_block" && elems % n != 0 {
                    let Err(e) = run else {
                        panic!("{what}: blocks of two lengths ran: {run:?}");
                    };
                    assert!(e.to_string().contains("must match in size"), "{what}: {e}");
                    continue;
                }
                let r = run.unwrap();
                let first = (0..elems).find(|&i| {
                    f16::from_f32(mutant_output(mutant, op, n, elems, i))
                        != f16::from_f32(reference(op, n, i))
                });
                let invisible = mutant == "mutant_double_count" && op != ReduceOp::Sum;
                assert_eq!(
                    first.is_none(),
                    invisible,
                    "{what}: the model disagrees with theory"
                );
                let Some(i) = first else {
                    assert_eq!(r.verified, Some(true), "{what}");
                    assert_eq!(c.first_mismatch(&m, &job), None, "{what}");
                    continue;
                };
                assert_eq!(r.verified, Some(false), "{what} passed verification");
                let mismatch = c.first_mismatch(&m, &job).expect("a wrong element");
                assert_eq!(
                    mismatch.to_string(),
                    format!(
                        "participant 0, element {i}: expected {}, got {}",
                        f16::from_f32(reference(op, n, i)),
                        f16::from_f32(mutant_output(mutant, op, n, elems, i))
                    ),
                    "{what}"
                );
                checked += 1;
            }
        }
    }
    // 4 systems × (skip_step and wrong_block at 12n elements: 3 ops each;
    // skip_step at 131: 3 ops; double_count: sum at both sizes); the
    // 131-element size splits evenly on none of them.
    assert_eq!(checked, 4 * (3 + 3 + 3 + 2));
}
