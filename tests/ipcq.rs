//! IPCQ, credits, install and launch on compiled machines (docs/model.md §IPCQ).

mod common;
use common::lean;
use half::f16;
use kernbench::kernel::wiring::{QueueConfig, ring};
use kernbench::kernel::{Addr, DType, Tl};
use kernbench::machine::Machine;
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::{Location, Space};
use kernbench_systems::RunError;
use kernbench_systems::ipcq::{Queues, Slot, SlotState};
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::QDir;

const B: u64 = 64; // inter-SIP bytes per tick
const L: u64 = 100; // inter-SIP latency in ticks

/// Two SIPs of one PE, only the inter-SIP link costs time (B, L), whole-chunk packets.
fn pair() -> System {
    let mut s = lean(2, SipTopology::Ring1d, None).spec;
    (s.links.inter_sip.bandwidth_gbps, s.links.inter_sip.latency_ns, s.links.inter_sip.packet_bytes) = (B as f64, L as f64, 1 << 30);
    for m in [&mut s.memory.tcm, &mut s.memory.sram, &mut s.memory.hbm] {
        m.ideal = true;
    }
    System::from_spec(s, "test").unwrap()
}

fn cfg(n_slots: u32, slot_size: u64) -> QueueConfig {
    QueueConfig { buffer: Space::Tcm, n_slots, slot_size, base: 0 }
}

fn installed(sys: &System, q: QueueConfig, mode: DataMode) -> Machine {
    let mut m = Machine::build_with(sys, mode).unwrap();
    m.set_oplog(true);
    let tables = ring(&[0, 1], QDir::E, q).unwrap();
    m.install(tables).unwrap();
    m
}

/// PE 0 sends `elems` f16 east; PE 1 receives them from the west.
fn p2p(tl: &mut Tl, elems: &usize) {
    if tl.program_id(0) == 0 {
        let x = tl.load(Addr::tcm(0), *elems);
        tl.send(QDir::E, x);
    } else {
        let y = tl.recv(QDir::W, &[*elems], DType::F16);
        tl.store(Addr::tcm(0), y);
    }
}

/// (send start, recv end) from the op log.
fn send_recv_ticks(m: &Machine) -> (u64, u64) {
    let log = &m.oplog().records;
    let send = log.iter().find(|r| r.op == "send").unwrap();
    let recv = log.iter().find(|r| r.op == "recv").unwrap();
    (send.start, recv.end)
}

fn run_p2p(bytes: u64, q: QueueConfig) -> u64 {
    let sys = pair();
    let mut m = installed(&sys, q, DataMode::TimingOnly);
    m.launch(p2p, &((bytes / 2) as usize), &[0, 1]).unwrap();
    let (s, r) = send_recv_ticks(&m);
    r - s
}

#[test]
fn p2p_with_enough_slots_pipelines_chunks() {
    for (bytes, slot) in [(4096u64, 1024u64), (10_000, 1024), (64, 64), (1 << 20, 1 << 16)] {
        let c = bytes.div_ceil(slot);
        let last = bytes - (c - 1) * slot;
        let expect = L + (c - 1) * slot.div_ceil(B) + last.div_ceil(B);
        assert_eq!(run_p2p(bytes, cfg(c as u32, slot)), expect, "{bytes} B in {slot} B slots");
    }
}

#[test]
fn p2p_with_one_slot_waits_a_credit_round_trip_per_chunk() {
    let credit = 16u64; // control.credit_bytes default
    for (bytes, slot) in [(4096u64, 1024u64), (10_000, 1024), (64, 64)] {
        let c = bytes.div_ceil(slot);
        let last = bytes - (c - 1) * slot;
        let a = L + slot.div_ceil(B);
        let cr = L + credit.div_ceil(B);
        let expect = (c - 1) * (a + cr) + L + last.div_ceil(B);
        assert_eq!(run_p2p(bytes, cfg(1, slot)), expect, "{bytes} B in {slot} B slots");
    }
}
