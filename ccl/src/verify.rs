//! Inputs and the independent reference: every participant's input values,
//! and the check of its buffer after a collective against a reference
//! computed without the algorithm (the first wrong element, or how many).

use crate::collective::{Collective, Job};
use crate::kernels::split;
use half::f16;
use std::fmt;

/// Most participants whose sums [`output_matches`] checks exactly: the
/// inputs are at most 3, and f16 holds every integer up to 2048.
pub const MAX_PARTICIPANTS: usize = 2048 / 3;

/// Participant `p`'s value at element `i`: 0 to 3 from a hash of (p, i).
/// Any two participants differ at about three elements in four, so a
/// result that counts one participant twice and drops another fails; a
/// pattern periodic in p (as an earlier `(7p + 3i) mod 5` was) would not.
pub fn value(p: usize, i: usize) -> f32 {
    let mut x = ((p as u64) << 32 ^ i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((x ^ (x >> 31)) & 3) as f32
}

/// Participant `p`'s buffer before the collective.
pub fn input(job: &Job, n: usize, p: usize) -> Vec<f16> {
    let blocks = split(job.elems, n);
    (0..job.elems)
        .map(|i| {
            let owned = match job.collective {
                Collective::AllGather => blocks[p].0 <= i && i < blocks[p].0 + blocks[p].1,
                Collective::Broadcast => p == 0,
                _ => true,
            };
            f16::from_f32(if owned { value(p, i) } else { 0.0 })
        })
        .collect()
}

/// The reduction of element `i` over all participants.
fn reduced(job: &Job, n: usize, i: usize) -> f32 {
    (1..n).fold(value(0, i), |acc, p| job.op.apply(acc, value(p, i)))
}

/// Whether participant `p`'s buffer after the collective is right.
pub fn output_matches(job: &Job, n: usize, p: usize, got: &[f16]) -> bool {
    first_mismatch(job, n, p, got).is_none()
}

/// The first element of participant `p`'s buffer that is wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mismatch {
    pub participant: usize,
    pub element: usize,
    /// NaN when there is no reference: an all-to-all buffer that is
    /// not `n` equal blocks (refused before a run).
    pub expected: f16,
    pub got: f16,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "participant {}, element {}: expected {}, got {}",
            self.participant, self.element, self.expected, self.got
        )
    }
}

/// The first element of `p`'s buffer after the collective that differs
/// from the reference (elements the collective leaves undefined, such
/// as blocks a reduce-scatter does not own, are not checked).
pub fn first_mismatch(job: &Job, n: usize, p: usize, got: &[f16]) -> Option<Mismatch> {
    let wrong = |element: usize, expected: f16| Mismatch {
        participant: p,
        element,
        expected,
        got: got.get(element).copied().unwrap_or(f16::NAN),
    };
    if !shape_checks(job, n, got) {
        return Some(wrong(0, f16::NAN));
    }
    let blocks = split(job.elems, n);
    (0..job.elems).find_map(|i| {
        let expect = expected(job, n, p, &blocks, i)?;
        (got.get(i) != Some(&expect)).then(|| wrong(i, expect))
    })
}

/// How many elements of `p`'s buffer differ from the reference (every
/// element when an all-to-all buffer has no reference).
pub fn count_wrong(job: &Job, n: usize, p: usize, got: &[f16]) -> u64 {
    if !shape_checks(job, n, got) {
        return job.elems as u64;
    }
    let blocks = split(job.elems, n);
    (0..job.elems)
        .filter(|&i| expected(job, n, p, &blocks, i).is_some_and(|e| got.get(i) != Some(&e)))
        .count() as u64
}

/// Whether the buffer has a reference: an all-to-all needs `n` equal
/// blocks.
fn shape_checks(job: &Job, n: usize, got: &[f16]) -> bool {
    job.collective != Collective::AllToAll
        || (n > 0 && job.elems.is_multiple_of(n) && got.len() == job.elems)
}

/// Element `i` of participant `p`'s result; None where the collective
/// leaves it undefined.
fn expected(job: &Job, n: usize, p: usize, blocks: &[(usize, usize)], i: usize) -> Option<f16> {
    let owner = |i: usize| {
        blocks
            .iter()
            .position(|b| b.0 <= i && i < b.0 + b.1)
            .unwrap_or(0)
    };
    let expect = match job.collective {
        Collective::AllReduce => reduced(job, n, i),
        Collective::ReduceScatter if owner(i) == p => reduced(job, n, i),
        Collective::ReduceScatter => return None,
        Collective::AllGather => value(owner(i), i),
        Collective::Broadcast => value(0, i),
        Collective::Reduce if p == 0 => reduced(job, n, i),
        Collective::Reduce => return None,
        // p's block j must be j's input block p.
        Collective::AllToAll => {
            let b = job.elems / n;
            value(i / b, p * b + i % b)
        }
    };
    Some(f16::from_f32(expect))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReduceOp, kernels};

    /// Counting one participant twice and dropping another changes the
    /// all-reduce of a 64-element buffer, for every pair of participants.
    #[test]
    fn no_participant_can_stand_in_for_another() {
        for n in [6usize, 16, 64] {
            let job = Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems: 64,
            };
            let sum = |skip: usize, twice: usize| -> Vec<f16> {
                (0..64)
                    .map(|i| {
                        let s: f32 = (0..n)
                            .map(|p| if p == skip { twice } else { p })
                            .map(|p| value(p, i))
                            .sum();
                        f16::from_f32(s)
                    })
                    .collect()
            };
            let right = sum(usize::MAX, 0);
            assert!(output_matches(&job, n, 0, &right));
            for a in 0..n {
                for b in (0..n).filter(|&b| b != a) {
                    assert!(
                        !output_matches(&job, n, 0, &sum(b, a)),
                        "{n} participants: {a} counted twice, {b} dropped, and it passed"
                    );
                }
            }
        }
        // Inputs stay within 0..=3, so MAX_PARTICIPANTS sums are exact.
        assert!((0..1000).all(|k| (0.0..=3.0).contains(&value(k % 97, k))));
        assert_eq!(MAX_PARTICIPANTS, 682);
    }

    /// A wrong output is reported at its first wrong element, with the
    /// reference and the value found; elements a reduce-scatter leaves
    /// undefined are never reported.
    #[test]
    fn the_first_wrong_element_is_named() {
        let n = 4;
        let job = |collective| Job {
            collective,
            op: ReduceOp::Max,
            elems: 40,
        };
        let reference = |job: &Job, p: usize| -> Vec<f16> {
            let blocks = kernels::split(job.elems, n);
            (0..job.elems)
                .map(|i| {
                    let all = (1..n).fold(value(0, i), |a, q| job.op.apply(a, value(q, i)));
                    let owner = blocks.iter().position(|b| b.0 <= i && i < b.0 + b.1);
                    let x = match job.collective {
                        Collective::ReduceScatter if owner != Some(p) => 7.0,
                        _ => all,
                    };
                    f16::from_f32(x)
                })
                .collect()
        };
        let ar = job(Collective::AllReduce);
        let mut got = reference(&ar, 2);
        assert_eq!(first_mismatch(&ar, n, 2, &got), None);
        got[23] = f16::from_f32(9.0);
        got[31] = f16::from_f32(9.0);
        let m = first_mismatch(&ar, n, 2, &got).expect("element 23 is wrong");
        let want = (1..n).fold(value(0, 23), |a, q| a.max(value(q, 23)));
        assert_eq!((m.participant, m.element), (2, 23));
        assert_eq!(
            m.to_string(),
            format!("participant 2, element 23: expected {want}, got 9")
        );
        // Reduce-scatter: participant 1 owns elements 10..20 only.
        let rs = job(Collective::ReduceScatter);
        let mut got = reference(&rs, 1);
        assert_eq!(first_mismatch(&rs, n, 1, &got), None);
        got[12] = f16::from_f32(9.0);
        assert_eq!(first_mismatch(&rs, n, 1, &got).map(|m| m.element), Some(12));
    }

    /// All-to-all: the right exchange passes; any participant whose two
    /// received blocks are swapped fails, for every pair of blocks. (Two
    /// blocks of b elements agree by chance with probability 4^-b: at 8
    /// elements one of the 1,920 swaps below does.)
    #[test]
    fn a_swapped_pair_of_all_to_all_blocks_fails() {
        for n in [2usize, 5, 16] {
            let b = 32;
            let job = Job {
                collective: Collective::AllToAll,
                op: ReduceOp::Sum,
                elems: n * b,
            };
            // p's block j is j's input block p.
            let out = |p: usize, order: &dyn Fn(usize) -> usize| -> Vec<f16> {
                (0..n * b)
                    .map(|i| f16::from_f32(value(order(i / b), p * b + i % b)))
                    .collect()
            };
            for p in 0..n {
                assert!(output_matches(&job, n, p, &out(p, &|j| j)));
                assert!(!output_matches(&job, n, p, &input(&job, n, p)) || n == 1);
                for x in 0..n {
                    for y in (x + 1)..n {
                        let swap = |j: usize| match j {
                            j if j == x => y,
                            j if j == y => x,
                            j => j,
                        };
                        assert!(
                            !output_matches(&job, n, p, &out(p, &swap)),
                            "{n} participants: p{p} with blocks {x} and {y} swapped passed"
                        );
                    }
                }
            }
        }
        // A buffer that is not n equal blocks never matches.
        let job = Job {
            collective: Collective::AllToAll,
            op: ReduceOp::Sum,
            elems: 7,
        };
        assert!(!output_matches(&job, 2, 0, &input(&job, 2, 0)));
    }
}
