//! `star` (test only): the simplest correct collective, proof that an
//! algorithm is one file, one line in the registry and one ccl config
//! entry (here in tests/data/ccl/test_algorithms.yaml, so users never see
//! it). Every other participant sends its whole buffer to participant 0,
//! which combines them in participant order (reduce, all-reduce) and sends
//! the result back to each (broadcast, all-reduce). Participant 0 talks to
//! participant k on channel k − 1, every other one to 0 on channel 0.
//! Compiled only with the `test-algorithms` feature.

use super::primitives::me;
use crate::cost::{CostTerms, HeldPrograms, InFlight, participants};
use crate::kernels::Buffer;
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct Star;

/// Participant 0 has a channel per other participant, and channels are
/// numbered by a u8.
const MAX_PARTICIPANTS: usize = 256;

/// The channel participant 0 uses for participant `k` (k ≥ 1).
fn channel_of(k: usize) -> QDir {
    QDir::Chan((k - 1) as u8)
}

/// Participant 0 combines every other one's buffer into its own.
fn gather(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, me: usize) {
    let all = buf.atoms(&[]);
    if me != 0 {
        buf.send(tl, &all, QDir::Chan(0));
        return;
    }
    for k in 1..a.group.size() {
        for c in &all {
            buf.recv_combine(tl, a.job.op, c, channel_of(k), None);
        }
    }
}

/// Participant 0 sends its buffer to every other one.
fn scatter(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, me: usize) {
    let all = buf.atoms(&[]);
    if me != 0 {
        for c in &all {
            buf.recv_replace(tl, c, QDir::Chan(0), None);
        }
        return;
    }
    for k in 1..a.group.size() {
        buf.send(tl, &all, channel_of(k));
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let me = me(tl, &a.group);
    if a.group.size() == 1 {
        return;
    }
    let mut buf = Buffer::new(a.buffer(tl), a.job.elems, &[a.pieces(a.job.elems, 1)]);
    let all = buf.atoms(&[]);
    let collective = a.job.collective;
    if collective != Collective::Broadcast || me == 0 {
        buf.load(tl, &all);
    }
    if collective != Collective::Broadcast {
        gather(tl, a, &mut buf, me);
    }
    if collective != Collective::Reduce {
        scatter(tl, a, &mut buf, me);
    }
    let keeps_result = match collective {
        Collective::Reduce => me == 0,
        Collective::Broadcast => me != 0,
        _ => true,
    };
    if keeps_result {
        buf.store(tl, &all);
    }
}

impl Algorithm for Star {
    fn name(&self) -> &'static str {
        "star"
    }
    fn summary(&self) -> &'static str {
        "test only: everyone sends to participant 0, which reduces and sends the result back"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[
            Collective::AllReduce,
            Collective::Reduce,
            Collective::Broadcast,
        ]
    }
    fn check_group(&self, g: &Group) -> Result<(), String> {
        let n = g.size();
        if n > MAX_PARTICIPANTS {
            return Err(format!(
                "a group of {n} participants: star gives participant 0 one logical channel per other participant (QDir::Chan is a u8), so at most {MAX_PARTICIPANTS}; allowed: fewer SIPs or cubes"
            ));
        }
        Ok(())
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let n = g.size();
        g.wire_each(|p| {
            if p == 0 {
                (1..n)
                    .map(|k| q.entry(channel_of(k), g.pe(k), QDir::Chan(0)))
                    .collect()
            } else {
                vec![q.entry(QDir::Chan(0), g.pe(0), channel_of(p))]
            }
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // The whole buffer once each way per participant (participant 0
        // sends and receives p − 1 of them, one at a time).
        let sends = if c == Collective::AllReduce { 2.0 } else { 1.0 };
        CostTerms {
            sends,
            bytes_per_send: bytes,
            stages: 1,
            lockstep: participants(g),
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            in_flight: InFlight::Sends(sends),
        }
    }
}
