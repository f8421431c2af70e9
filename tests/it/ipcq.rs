//! IPCQ, credits, install and launch on compiled machines (docs/model.md §IPCQ).

use crate::common;
use bevy_ecs::entity::Entity;
use bevy_ecs::world::World;
use common::lean;
use half::f16;
use kernbench::kernel::wiring::{QueueConfig, ring};
use kernbench::kernel::{Addr, DType, Tl};
use kernbench::machine::{InstallError, Machine};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::{Location, Space};
use kernbench_systems::exec::PeExec;
use kernbench_systems::hierarchy::Hardware;
use kernbench_systems::ipcq::{Queues, Scope};
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::QDir;
use kernbench_systems::{Clock, NodeId, PeIdx, RunError};

const B: u64 = 64; // inter-SIP bytes per tick
const L: u64 = 100; // inter-SIP latency in ticks

/// Two SIPs of one PE, only the inter-SIP link costs time (B, L), whole-chunk packets.
fn pair() -> System {
    common::lean_links(2, B, L)
}

fn cfg(n_slots: u32, slot_size: u64) -> QueueConfig {
    QueueConfig {
        buffer: Space::Tcm,
        n_slots,
        slot_size,
    }
}

fn installed(sys: &System, q: QueueConfig, mode: DataMode) -> Machine {
    let mut m = Machine::build_with(sys, mode).unwrap();
    m.record_ops();
    let tables = ring(&[PeIdx(0), PeIdx(1)], QDir::E, q).unwrap();
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
    let log = m.op_records();
    let send = log.iter().find(|r| r.op == "send").unwrap();
    let recv = log.iter().find(|r| r.op == "recv").unwrap();
    (send.start, recv.end)
}

fn run_p2p(bytes: u64, q: QueueConfig) -> u64 {
    let sys = pair();
    let mut m = installed(&sys, q, DataMode::TimingOnly);
    m.launch(p2p, &((bytes / 2) as usize), &[PeIdx(0), PeIdx(1)])
        .unwrap();
    let (s, r) = send_recv_ticks(&m);
    r - s
}

#[test]
fn p2p_with_enough_slots_pipelines_chunks() {
    for (bytes, slot) in [
        (4096u64, 1024u64),
        (10_000, 1024),
        (64, 64),
        (1 << 20, 1 << 16),
    ] {
        let c = bytes.div_ceil(slot);
        let last = bytes - (c - 1) * slot;
        let expect = L + (c - 1) * slot.div_ceil(B) + last.div_ceil(B);
        assert_eq!(
            run_p2p(bytes, cfg(c as u32, slot)),
            expect,
            "{bytes} B in {slot} B slots"
        );
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
        assert_eq!(
            run_p2p(bytes, cfg(1, slot)),
            expect,
            "{bytes} B in {slot} B slots"
        );
    }
}

/// A recv's result due after the tick that produced it costs no schedule run
/// of that tick (docs/model.md §The clock): with a TCM that takes time, a
/// chunk's slot read ends ticks after the slot was written, and the run goes
/// from the write to the read's end without visiting the write's tick again.
#[test]
fn a_result_due_later_costs_no_run_of_the_tick_that_produced_it() {
    let mut spec = pair().spec;
    spec.memory.tcm.ideal = false;
    let sys = System::from_spec(spec, "test").unwrap();
    let mut m = installed(&sys, cfg(2, 4096), DataMode::TimingOnly);
    let launch = m
        .submit(p2p, &2048, &[PeIdx(0), PeIdx(1)], Scope::DEFAULT, 0)
        .unwrap();
    let mut runs = Vec::new();
    loop {
        let idle = m.engine.step();
        runs.push(m.engine.world.resource::<Clock>().last_run);
        if idle {
            break;
        }
    }
    // 0: tables and launches leave the host; 100: the programs start (launch
    // overhead), PE 0 loads its 4 KiB (1 + 4096/2048 ticks); 103: it sends,
    // reading the chunk until 106, when the chunk leaves; 270 = 106 + L +
    // 4096/B: it arrives and is written until 273; 273: the recv reads the
    // slot until 276, its result and the credit due then; 276: the register
    // lands, PE 1 stores it and the credit leaves; 377 = 276 + L + 16/B: the
    // credit is back. Applying the recv's result in a run of its own at 273
    // visited 273 twice.
    assert_eq!(runs, [0, 100, 103, 106, 270, 273, 276, 377]);
    assert!(m.finished(&launch));
}

/// Per queue: credits + slots in flight + full slots + credits in flight =
/// n_slots, with the slot states read from the queue's slots; returns the
/// slots in flight and full over all queues.
fn check_credits(m: &mut Machine) -> u32 {
    let world = &m.engine.world;
    let queues = world.resource::<Queues>();
    let mut busy = 0;
    for (q, qu) in queues.list.iter().enumerate() {
        let (in_flight, full) = qu.slot_counts();
        assert_eq!(
            qu.credits + in_flight + full + qu.credits_in_flight,
            qu.n_slots,
            "queue {q}"
        );
        assert_eq!(qu.slots.len(), qu.n_slots as usize, "queue {q}");
        busy += in_flight + full;
    }
    busy
}

/// Both PEs send `bytes` each way and receive from both sides.
fn exchange(tl: &mut Tl, elems: &usize) {
    let me = tl.program_id(0) as u64;
    let x = tl.load(Addr::tcm(0), *elems);
    let y = tl.load(Addr::tcm(1 << 16), *elems);
    tl.send(QDir::E, x);
    tl.send(QDir::W, y);
    let from_w = tl.recv(QDir::W, &[*elems], DType::F16);
    let from_e = tl.recv(QDir::E, &[*elems], DType::F16);
    tl.store(Addr::tcm((2 + me) << 16), from_w);
    tl.store(Addr::tcm((4 + me) << 16), from_e);
}

fn tcm(pe: u32, offset: u64) -> Location {
    Location {
        space: Space::Tcm,
        sip: pe,
        cube: 0,
        pe: 0,
        offset,
    }
}

fn values(seed: u32, n: usize) -> Vec<f16> {
    (0..n)
        .map(|i| f16::from_f32(((i as u32 * 7 + seed * 13) % 97) as f32))
        .collect()
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn credits_are_conserved_at_every_tick(elems in 1usize..3000, n_slots in 1u32..6, slot_pow in 5u32..12) {
            let sys = pair();
            let mut m = installed(&sys, cfg(n_slots, 1 << slot_pow), DataMode::TimingOnly);
            for pe in 0..2 {
                for off in [0, 1 << 16] {
                    m.write(tcm(pe, off), &values(pe, elems)).unwrap();
                }
            }
            let coords = |g: u32| (PeIdx(g), [g, 0, 0]);
            let programs = kernbench::kernel::trace(exchange, &elems, &[coords(0), coords(1)], &m.addresses, &m.topology).unwrap();
            let _ = m.engine.launch(Scope::DEFAULT, programs, 0);
            while !m.engine.step() {
                check_credits(&mut m);
            }
            m.engine.finish().unwrap();
            prop_assert_eq!(check_credits(&mut m), 0);
            let queues = m.engine.world.resource::<Queues>();
            for qu in &queues.list {
                prop_assert_eq!(qu.credits, qu.n_slots);
                prop_assert_eq!(qu.credits_in_flight, 0);
            }
        }
    }
}

#[test]
fn two_rank_bidirectional_ring_delivers_both_directions() {
    let elems = 1500;
    let sys = pair();
    let mut m = installed(&sys, cfg(2, 512), DataMode::Functional);
    for pe in 0..2 {
        m.write(tcm(pe, 0), &values(pe, elems)).unwrap();
        m.write(tcm(pe, 1 << 16), &values(pe + 10, elems)).unwrap();
    }
    m.launch(exchange, &elems, &[PeIdx(0), PeIdx(1)]).unwrap();
    for me in 0..2u32 {
        let peer = 1 - me;
        // West neighbour sent its "east" vector (offset 0), east neighbour its "west" one.
        assert_eq!(
            m.read(tcm(me, (2 + me as u64) << 16), elems).unwrap(),
            values(peer, elems),
            "PE {me} from W"
        );
        assert_eq!(
            m.read(tcm(me, (4 + me as u64) << 16), elems).unwrap(),
            values(peer + 10, elems),
            "PE {me} from E"
        );
    }
}

/// Entities in a machine's world after installing a two-PE ring with `q`.
fn entities_after_install(q: QueueConfig) -> (usize, Vec<usize>) {
    let mut m = installed(&pair(), q, DataMode::TimingOnly);
    let world = &mut m.engine.world;
    let entities = world.query::<Entity>().iter(world).count();
    let slots = world
        .resource::<Queues>()
        .list
        .iter()
        .map(|q| q.slots.len())
        .collect();
    (entities, slots)
}

#[test]
fn slots_are_queue_state_not_entities() {
    // A queue's slots live in the queue: 64 slots spawn no more entities than 2.
    let (few, few_slots) = entities_after_install(cfg(2, 256));
    let (many, many_slots) = entities_after_install(cfg(64, 256));
    assert_eq!(few_slots, [2; 4]); // two PEs, a queue east and west each
    assert_eq!(many_slots, [64; 4]);
    assert_eq!(many, few);
}

/// A compute kernel on one PE: `rounds` adds over `n` elements of its TCM.
fn busy(tl: &mut Tl, &(n, rounds): &(usize, usize)) {
    let x = tl.load(Addr::tcm(0), n);
    let acc = tl.repeat(rounds, &[x], |tl, _, acc| vec![tl.add(acc[0], acc[0])]);
    tl.store(Addr::tcm(0), acc[0]);
}

/// A wait that ends while other work still runs leaves the clock at the
/// awaited launch's end, not at the other work's next event (docs/model.md
/// §The clock): a launch sent then starts as long after that end as the
/// first started after it left.
#[test]
fn a_wait_leaves_the_clock_at_the_awaited_end() {
    let sys = common::lean_links(4, B, L);
    let mut m = installed(&sys, cfg(2, 256), DataMode::TimingOnly);
    let long = m
        .submit(p2p, &(16 << 10), &[PeIdx(0), PeIdx(1)], Scope::DEFAULT, 0)
        .unwrap();
    let left = m.engine.now();
    let short = m
        .submit(busy, &(1024, 4), &[PeIdx(2)], Scope::DEFAULT, 0)
        .unwrap();
    let first = m.wait(short).unwrap();
    assert!(!m.finished(&long), "the transfer still runs");
    assert_eq!(m.engine.now(), first.end);
    let next = m
        .submit(busy, &(1024, 4), &[PeIdx(2)], Scope::DEFAULT, first.end)
        .unwrap();
    let second = m.wait(next).unwrap();
    assert_eq!(second.start - first.end, first.start - left);
    assert_eq!(second.end - second.start, first.end - first.start);
    m.wait(long).unwrap();
}

#[test]
fn a_launch_to_a_busy_pe_queues_on_that_pe() {
    let mut m = installed(&pair(), cfg(2, 256), DataMode::TimingOnly);
    let pes = [PeIdx(0), PeIdx(1)];
    let first = m.submit(p2p, &128, &pes, Scope::DEFAULT, 0).unwrap();
    let second = m.submit(p2p, &128, &pes, Scope::DEFAULT, 0).unwrap();
    let receiver = m.engine.world.resource::<Hardware>().pe_entity(PeIdx(1));
    let queued = |w: &World| w.get::<PeExec>(receiver).map_or(0, |ex| ex.queued.len());
    // Both launches reach the receiver while it runs the first: the second
    // waits on its own execution state.
    assert!(m.engine.run_until(|w| queued(w) == 1).unwrap());
    let (a, b) = (m.wait(first).unwrap(), m.wait(second).unwrap());
    assert_eq!(queued(&m.engine.world), 0);
    assert!(b.end > a.end, "{a:?} then {b:?}");
}

#[test]
fn installing_twice_names_the_pe() {
    let sys = pair();
    let mut m = Machine::build(&sys).unwrap();
    let mut tables = ring(&[PeIdx(0), PeIdx(1)], QDir::E, cfg(2, 256)).unwrap();
    tables.push(tables[1].clone());
    let err = m.install(tables).unwrap_err();
    assert!(
        matches!(&err, InstallError::Run(RunError::Failed(e)) if e.contains("sip1.cube0.pe0") && e.contains("installed twice")),
        "{err}"
    );
}

/// Releasing a scope frees its slot areas and takes its tables off the
/// PEs, so the same wiring installs again (as a new scope) into the same
/// memory; a scope never opened is refused by number.
#[test]
fn a_released_scope_gives_its_memory_and_tables_back() {
    use kernbench_systems::ipcq::NeighborTables;
    let sys = pair();
    let mut m = Machine::build(&sys).unwrap();
    let tables = || ring(&[PeIdx(0), PeIdx(1)], QDir::E, cfg(2, 256)).unwrap();
    let size = m.memory.size(Space::Tcm);
    let first = m.open_scope("first");
    m.install_scope(first, tables()).unwrap();
    let held = m.scope_bytes(first, Space::Tcm);
    assert_eq!(held, 2 * 2 * 2 * 256, "2 PEs x 2 queues x 2 slots x 256 B");
    assert_eq!(m.release_scope(first).unwrap(), held);
    assert_eq!(m.memory.free_below(Space::Tcm, 0), size);
    let pe0 = m.engine.world.resource::<Hardware>().pe_entity(PeIdx(0));
    let on_pe0 = m.engine.world.get::<NeighborTables>(pe0).unwrap();
    assert!(on_pe0.get(first).is_none());
    assert_eq!(m.scope_name(first), "first (released)");
    let again = m.open_scope("again");
    m.install_scope(again, tables()).unwrap();
    assert_eq!(m.scope_bytes(again, Space::Tcm), held);
    let e = m.release_scope(Scope(9)).unwrap_err().to_string();
    assert_eq!(
        e,
        "communicator scope 9 was never opened (this machine has scopes 0..3); release only a scope a communicator holds"
    );
}

/// Every queue's settings, sorted: the observable result of an install.
fn ipcq_state(m: &Machine) -> Vec<String> {
    let mut v: Vec<String> = m
        .engine
        .world
        .resource::<Queues>()
        .list
        .iter()
        .map(|q| {
            format!(
                "{} {:?} from {:?} {:?}@{} {}x{} credits {}",
                q.receiver, q.dir, q.sender_pe, q.buffer, q.base, q.n_slots, q.slot_size, q.credits
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn install_order_does_not_change_the_final_state() {
    let sys = lean(6, SipTopology::Ring1d, None);
    let tables = ring(
        &(0..6).map(PeIdx).collect::<Vec<_>>(),
        QDir::GlobalE,
        cfg(3, 1024),
    )
    .unwrap();
    let mut a = Machine::build(&sys).unwrap();
    a.install(tables.clone()).unwrap();
    let mut shuffled = tables.clone();
    shuffled.reverse();
    shuffled.swap(1, 4);
    let mut b = Machine::build(&sys).unwrap();
    b.install(shuffled).unwrap();
    assert_eq!(ipcq_state(&a), ipcq_state(&b));
    assert_eq!(ipcq_state(&a).len(), 12);
    assert_eq!(a.engine.now(), b.engine.now());
}

#[test]
fn install_takes_time_that_grows_with_the_route() {
    // Installs travel host -> PCIe -> SIP I/O -> NoC -> PE; a PE further from
    // its SIP's I/O router installs later.
    let sys = kernbench::spec::System::embedded_default();
    let t_near = {
        let mut m = Machine::build(&sys).unwrap();
        m.install(vec![(m.pe_index(0, 0, 0), vec![])]).unwrap()
    };
    let t_far = {
        let mut m = Machine::build(&sys).unwrap();
        m.install(vec![(m.pe_index(0, 15, 7), vec![])]).unwrap()
    };
    assert!(t_near > 0);
    assert!(t_far > t_near, "far {t_far} vs near {t_near}");
    let m = Machine::build(&sys).unwrap();
    let (near, far) = (
        m.topology.hops(NodeId(0), m.pe_node(0, 0, 0)).unwrap(),
        m.topology.hops(NodeId(0), m.pe_node(0, 15, 7)).unwrap(),
    );
    assert!(far > near);
}

fn lonely_recv(tl: &mut Tl, _: &()) {
    if tl.program_id(0) == 1 {
        let _ = tl.recv(QDir::W, &[8], DType::F16);
    }
}

#[test]
fn a_recv_without_a_send_is_reported_as_a_deadlock() {
    let sys = pair();
    let mut m = installed(&sys, cfg(2, 256), DataMode::TimingOnly);
    let err = m
        .launch(lonely_recv, &(), &[PeIdx(0), PeIdx(1)])
        .unwrap_err();
    let report = err.to_string();
    println!("{report}");
    assert!(report.contains("deadlock"), "{report}");
    assert!(report.contains("sip1.cube0.pe0"), "{report}");
    assert!(report.contains("recv"), "{report}");
    assert!(report.contains("on W"), "{report}");
    assert!(report.contains("sender credits 2/2"), "{report}");
    assert!(
        !report.contains("sip0.cube0.pe0:"),
        "PE 0 finished: {report}"
    );
}

/// Loads a vector, adds what the west neighbour sends, stores the sum.
fn add_neighbour(tl: &mut Tl, elems: &usize) {
    let x = tl.load(Addr::tcm(0), *elems);
    tl.send(QDir::E, x);
    let y = tl.recv(QDir::W, &[*elems], DType::F16);
    let z = tl.add(x, y);
    tl.store(Addr::tcm(1 << 16), z);
}

#[test]
fn functional_sums_are_bit_exact_and_timing_matches_timing_only() {
    let elems = 777;
    let sys = lean(4, SipTopology::Ring1d, None);
    let pes: Vec<PeIdx> = (0..4).map(PeIdx).collect();
    let run = |mode: DataMode| {
        let mut m = Machine::build_with(&sys, mode).unwrap();
        m.install(ring(&pes, QDir::E, cfg(2, 256)).unwrap())
            .unwrap();
        for pe in 0..4 {
            m.write(tcm(pe, 0), &values(pe, elems)).unwrap();
        }
        let r = m.launch(add_neighbour, &elems, &pes).unwrap();
        (m, r)
    };
    let (m, functional) = run(DataMode::Functional);
    for pe in 0..4u32 {
        let west = (pe + 3) % 4;
        let expect: Vec<f16> = values(pe, elems)
            .iter()
            .zip(values(west, elems))
            .map(|(a, b)| f16::from_f32(a.to_f32() + b.to_f32()))
            .collect();
        assert_eq!(m.read(tcm(pe, 1 << 16), elems).unwrap(), expect, "PE {pe}");
    }
    let (_, timing) = run(DataMode::TimingOnly);
    assert_eq!(functional.kernel_end, timing.kernel_end);
    assert_eq!(functional.end_tick, timing.end_tick);
}

#[test]
fn oplog_has_one_consistent_record_per_op() {
    let elems = 300;
    let sys = pair();
    let mut m = installed(&sys, cfg(2, 256), DataMode::Functional);
    for pe in 0..2 {
        m.write(tcm(pe, 0), &values(pe, elems)).unwrap();
    }
    m.launch(add_neighbour, &elems, &[PeIdx(0), PeIdx(1)])
        .unwrap();
    let log = m.op_records();
    assert_eq!(log.len(), 2 * 5, "load, send, recv, add, store on each PE");
    for r in &log {
        assert!(r.start <= r.end, "{r:?}");
        assert_eq!(r.bytes, elems as u64 * 2, "{r:?}");
    }
    let ops: Vec<&str> = log.iter().filter(|r| r.sip == 1).map(|r| r.op).collect();
    assert_eq!(ops, ["load", "send", "recv", "add", "store"]);
    let flows: Vec<_> = log
        .iter()
        .filter_map(|r| r.flow.map(|f| (r.op, f)))
        .collect();
    assert_eq!(
        flows.len(),
        4,
        "each PE's send and recv carry a flow id: {flows:?}"
    );
    for (op, f) in &flows {
        let other = if *op == "send" { "recv" } else { "send" };
        assert!(flows.contains(&(other, *f)), "{op} {f:#x} has no {other}");
    }
}

#[test]
fn a_communicator_installed_twice_on_a_pe_is_refused_naming_both() {
    let sys = pair();
    let mut m = Machine::build(&sys).unwrap();
    let tp = m.open_scope("tp0");
    let tables = ring(&[PeIdx(0), PeIdx(1)], QDir::E, cfg(2, 256)).unwrap();
    m.install_scope(tp, tables.clone()).unwrap();
    let e = m.install_scope(tp, tables.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "sip0.cube0.pe0 already holds the neighbour table of communicator 'tp0' (scope 1); a communicator is installed once per PE: create a new communicator for other wiring"
    );
    // Another communicator on the same PEs gets queues of its own.
    let dp = m.open_scope("dp0");
    m.install_scope(dp, tables).unwrap();
    let queues = m.engine.world.resource::<Queues>();
    let scopes: Vec<Scope> = queues.list.iter().map(|q| q.scope).collect();
    assert_eq!(scopes.iter().filter(|&&s| s == tp).count(), 4);
    assert_eq!(scopes.iter().filter(|&&s| s == dp).count(), 4);
}
