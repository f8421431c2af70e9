//! Synthetic traffic for tests, benches and `kernbench bench`.

use crate::kernel::{Addr, DType, Tl};
use kernbench_systems::program::QDir;
use kernbench_systems::{Arrival, Injector, NodeId, Traffic, TrafficMessage};

/// Ring rounds: node i sends `bytes` to node i+1 (mod n); its round r+1 starts
/// the tick it has received round r from node i−1. Round 0 starts at tick 0.
#[derive(Debug, Clone)]
pub struct RingRounds {
    nodes: Vec<NodeId>,
    bytes: u64,
    rounds: u64,
    /// Tick at which each node received its last round.
    pub finished: Vec<u64>,
}

impl RingRounds {
    pub fn new(nodes: Vec<NodeId>, bytes: u64, rounds: u64) -> Self {
        let finished = vec![0; nodes.len()];
        Self {
            nodes,
            bytes,
            rounds,
            finished,
        }
    }

    /// Messages the workload sends in total.
    pub fn messages(&self) -> u64 {
        self.nodes.len() as u64 * self.rounds
    }

    fn send(&self, i: usize, round: u64, at: u64, net: &mut Injector) {
        let n = self.nodes.len();
        net.send(TrafficMessage {
            src: self.nodes[i],
            dst: self.nodes[(i + 1) % n],
            bytes: self.bytes,
            at,
            tag: round * n as u64 + i as u64,
        });
    }
}

impl Traffic for RingRounds {
    fn start(&mut self, net: &mut Injector) {
        if self.rounds > 0 {
            for i in 0..self.nodes.len() {
                self.send(i, 0, 0, net);
            }
        }
    }

    fn on_arrival(&mut self, a: Arrival, net: &mut Injector) {
        let n = self.nodes.len() as u64;
        let (round, sender) = (a.tag / n, a.tag % n);
        let receiver = ((sender + 1) % n) as usize;
        self.finished[receiver] = a.at;
        if round + 1 < self.rounds {
            self.send(receiver, round + 1, a.at, net);
        }
    }
}

/// Arguments of [`ring_kernel`].
#[derive(Debug, Clone, Copy)]
pub struct RingKernelArgs {
    pub rounds: usize,
    pub elems: usize,
}

/// Ring rounds as a kernel: each PE loads a vector, then `rounds` times sends
/// its accumulator east, receives the west neighbour's and adds it in (one
/// loop, so the program is five ops whatever the rounds).
pub fn ring_kernel(tl: &mut Tl, a: &RingKernelArgs) {
    let acc = tl.load(Addr::tcm(0), a.elems);
    tl.repeat(a.rounds, &[acc], |tl, _, acc| {
        tl.send(QDir::E, acc[0]);
        let x = tl.recv(QDir::W, &[a.elems], DType::F16);
        vec![tl.add(acc[0], x)]
    });
}
