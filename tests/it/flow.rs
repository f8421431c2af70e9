//! The flow-level network (docs/model.md §Flow-level network): uncontended
//! messages take the packet engine's tick, shared links follow max-min
//! fairness, link statistics and counters equal packet mode's.

use crate::common;
use common::{lean, system};
use kernbench::ccl::{Collective, Job, ReduceOp};
use kernbench::machine::Machine;
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench::workload::RingRounds;
use kernbench_systems::memory::DataMode;
use kernbench_systems::network::flow::LegSpan;
use kernbench_systems::network::{NetCounters, NetworkModel};
use kernbench_systems::{
    Engine, LinkClass, LinkStats, LinkTableBuilder, NodeId, RouteSource, ScheduledTraffic, Start,
};
use proptest::prelude::*;

const BOTH: [NetworkModel; 2] = [NetworkModel::Packet, NetworkModel::Flow];

/// Nodes on a line; the route walks the line.
struct Line;

impl RouteSource for Line {
    fn route(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String> {
        if src <= dst {
            out.extend((src.0..=dst.0).map(NodeId));
        } else {
            out.extend((dst.0..=src.0).rev().map(NodeId));
        }
        Ok(())
    }
}

fn class(bytes_per_tick: u64, latency: u64, packet_bytes: u64) -> LinkClass {
    LinkClass {
        name: "test".into(),
        latency,
        rate_num: bytes_per_tick,
        rate_den: 1,
        packet_bytes,
        ideal: false,
    }
}

/// A line whose link i↔i+1 has class `classes[i]`.
fn line(classes: &[LinkClass], model: NetworkModel) -> Engine {
    let n = classes.len() as u32;
    let mut b = LinkTableBuilder::new(n + 1, classes.to_vec());
    for i in 0..n {
        b.duplex(NodeId(i), NodeId(i + 1), i as u8);
    }
    let mut e = Engine::new(b.build(), Box::new(Line));
    e.set_network_model(model);
    e
}

/// What a run left: arrival ticks by message, every link's statistics and
/// the network counters.
#[derive(Debug, PartialEq)]
struct Outcome {
    arrivals: Vec<u64>,
    stats: Vec<LinkStats>,
    counters: NetCounters,
}

fn run(e: &mut Engine, t: ScheduledTraffic) -> Outcome {
    e.set_traffic(t);
    e.run().unwrap();
    let arrivals = e
        .traffic::<ScheduledTraffic>()
        .unwrap()
        .arrivals()
        .iter()
        .map(|a| a.expect("every message arrives"))
        .collect();
    let links = e.links();
    Outcome {
        arrivals,
        stats: links.ids().map(|l| links.stats(l)).collect(),
        counters: *e.world.resource::<NetCounters>(),
    }
}

/// The traffic `make` builds, on a line of `classes`, in packet then flow mode.
fn on_line(classes: &[LinkClass], make: impl Fn(&mut ScheduledTraffic)) -> [Outcome; 2] {
    BOTH.map(|model| {
        let mut t = ScheduledTraffic::new();
        make(&mut t);
        run(&mut line(classes, model), t)
    })
}

/// `sys` with its network model set in the spec.
fn with_model(sys: &System, model: NetworkModel) -> System {
    let mut spec = sys.spec.clone();
    spec.network.model = model;
    System::from_spec(spec, "test").unwrap()
}

/// The traffic `make` builds on a machine of `sys`, in packet then flow mode
/// (chosen through the spec).
fn on_machine(sys: &System, make: impl Fn(&Machine, &mut ScheduledTraffic)) -> [Outcome; 2] {
    BOTH.map(|model| {
        let mut m = Machine::build(&with_model(sys, model)).unwrap();
        assert_eq!(m.engine.network_model(), model);
        let mut t = ScheduledTraffic::new();
        make(&m, &mut t);
        run(&mut m.engine, t)
    })
}

#[test]
fn the_system_spec_chooses_the_network_model() {
    let default = System::embedded_default();
    assert_eq!(default.spec.network.model, NetworkModel::Packet);
    assert!(
        !default.to_yaml().contains("network"),
        "the default is not written out"
    );
    let yaml = format!(
        "{}network:\n  model: flow\n",
        kernbench::spec::DEFAULT_SYSTEM_YAML
    );
    let sys = System::from_yaml(&yaml, "test").unwrap();
    assert_eq!(sys.spec.network.model, NetworkModel::Flow);
    let again = System::from_yaml(&sys.to_yaml(), "test").unwrap();
    assert_eq!(again.spec, sys.spec);
    let m = Machine::build(&sys).unwrap();
    assert_eq!(m.engine.network_model(), NetworkModel::Flow);
}

#[test]
fn one_packet_over_k_hops_takes_the_same_tick_in_both_modes() {
    for (k, s, b, l) in [
        (1u64, 1000u64, 7u64, 3u64),
        (4, 4096, 64, 10),
        (9, 1, 1, 0),
        (6, 12_345, 100, 250),
    ] {
        let classes = vec![class(b, l, 1 << 40); k as usize];
        let [packet, flow] = on_line(&classes, |t| {
            t.add(NodeId(0), NodeId(k as u32), s, Start::At(0));
        });
        assert_eq!(packet.arrivals, vec![k * (l + s.div_ceil(b))]);
        assert_eq!(flow, packet, "k={k} s={s} B={b} L={l}");
    }
}

#[test]
fn pipelined_packets_take_the_same_tick_in_both_modes() {
    for (k, s, p, b, l) in [
        (1u64, 4096u64, 1024u64, 64u64, 5u64),
        (3, 4096, 1024, 64, 5),
        (5, 10_000, 1024, 64, 7),
        (4, 1_000_000, 4096, 100, 300),
        (2, 100, 64, 3, 0),
    ] {
        let n = s.div_ceil(p);
        let last = s - (n - 1) * p;
        let expect =
            k * l + (k - 1) * s.min(p).div_ceil(b) + (n - 1) * p.div_ceil(b) + last.div_ceil(b);
        let classes = vec![class(b, l, p); k as usize];
        let [packet, flow] = on_line(&classes, |t| {
            t.add(NodeId(0), NodeId(k as u32), s, Start::At(3));
        });
        assert_eq!(packet.arrivals, vec![3 + expect]);
        assert_eq!(flow, packet, "k={k} s={s} P={p} B={b} L={l}");
    }
}

#[test]
fn mixed_class_routes_take_the_same_tick_in_both_modes() {
    // A slow middle link, then a fast one with smaller packets: the route's
    // packet is the smallest, the slowest link paces the pipeline.
    let classes = [class(50, 4, 4096), class(7, 30, 8192), class(64, 2, 1024)];
    for s in [1, 1000, 1024, 5000, 100_000] {
        let [packet, flow] = on_line(&classes, |t| {
            t.add(NodeId(0), NodeId(3), s, Start::At(0));
            t.add(NodeId(3), NodeId(1), s, Start::At(10));
        });
        assert_eq!(flow, packet, "s={s}");
    }
    // A real machine path: NoC and one UCIe link, one packet and many.
    let sys = system(|s| s.system.sips.count = 1);
    for s in [200, 300_000] {
        let [packet, flow] = on_machine(&sys, |m, t| {
            t.add(m.pe_node(0, 0, 0), m.pe_node(0, 1, 0), s, Start::At(3));
        });
        assert_eq!(flow, packet, "s={s}");
    }
}

#[test]
fn all_ideal_routes_and_empty_messages_take_the_same_tick_in_both_modes() {
    let mut ideal = class(1, 100, 64);
    ideal.ideal = true;
    let [packet, flow] = on_line(&vec![ideal; 5], |t| {
        t.add(NodeId(0), NodeId(5), 1 << 20, Start::At(7));
        t.add(NodeId(0), NodeId(5), 1 << 20, Start::At(7));
    });
    assert_eq!(
        packet.arrivals,
        vec![7, 7],
        "an all-ideal route arrives at once"
    );
    assert_eq!(flow, packet);
    // 0 bytes: one empty packet, k latencies.
    let [packet, flow] = on_line(&vec![class(64, 9, 4096); 4], |t| {
        t.add(NodeId(0), NodeId(4), 0, Start::At(2));
    });
    assert_eq!(packet.arrivals, vec![2 + 4 * 9]);
    assert_eq!(flow, packet);
}

#[test]
fn ring_rounds_take_the_same_ticks_in_both_modes() {
    let mut spec = lean(8, SipTopology::Ring1d, None).spec;
    let inter = &mut spec.links.inter_sip;
    (inter.bandwidth_gbps, inter.latency_ns) = (32.0, 50.0);
    let sys = System::from_spec(spec, "test").unwrap();
    let per_round = 50 + 16 * 1024 / 32;
    for model in BOTH {
        let mut m = Machine::build(&with_model(&sys, model)).unwrap();
        let nodes = (0..8).map(|s| m.pe_node(s, 0, 0)).collect();
        m.engine.set_traffic(RingRounds::new(nodes, 16 * 1024, 14));
        let r = m.engine.run().unwrap();
        assert_eq!(r.end_tick, 14 * per_round, "{model:?}");
        assert_eq!((r.messages, r.hops), (8 * 14, 8 * 14 * 4 * 5), "{model:?}");
    }
}

#[test]
fn flows_sent_while_packets_travel_keep_their_ticks() {
    // A long train 0→4 and a short message 4→3 are injected as packets at
    // tick 0; then flow mode: the message sent when the short one arrives
    // (4→0, against the train) is a flow while the train's packets are
    // routed ahead. It arrives exactly its uncontended time after it was
    // sent, as in packet mode, and the train at its own.
    let classes = vec![class(64, 10, 256); 4];
    let mut e = line(&classes, NetworkModel::Packet);
    let mut t = ScheduledTraffic::new();
    t.add(NodeId(0), NodeId(4), 100_000, Start::At(0));
    let short = t.add(NodeId(4), NodeId(3), 64, Start::At(0));
    t.add(
        NodeId(4),
        NodeId(0),
        10_000,
        Start::After {
            after: short,
            delay: 0,
        },
    );
    e.set_traffic(t);
    e.step();
    e.set_network_model(NetworkModel::Flow);
    e.run().unwrap();
    let a = e.traffic::<ScheduledTraffic>().unwrap().arrivals().to_vec();
    let [packet, _] = on_line(&classes, |t| {
        t.add(NodeId(0), NodeId(4), 100_000, Start::At(0));
        t.add(NodeId(4), NodeId(0), 10_000, Start::At(11));
    });
    assert_eq!(
        a,
        vec![Some(packet.arrivals[0]), Some(11), Some(packet.arrivals[1])]
    );
    assert_eq!(packet.arrivals, vec![1615, 220]);
}

/// Arrivals of messages sent together over one link of 64 B/tick, L = 20,
/// whole-message packets, in packet then flow mode.
fn one_link_arrivals(sizes: &[u64]) -> [Vec<u64>; 2] {
    BOTH.map(|model| {
        let mut t = ScheduledTraffic::new();
        for &s in sizes {
            t.add(NodeId(0), NodeId(1), s, Start::At(0));
        }
        run(&mut line(&[class(64, 20, 1 << 20)], model), t).arrivals
    })
}

#[test]
fn messages_of_one_route_drain_one_after_the_other() {
    // The route serves its messages in order, as its link does packets:
    // the first after its overhead L = 20 and s/B = 64 ticks (84), the
    // second drains behind it for another 64 (148), in both modes.
    assert_eq!(
        one_link_arrivals(&[4096, 4096]),
        [vec![84, 148], vec![84, 148]]
    );
}

#[test]
fn a_short_message_behind_a_long_one_on_its_route_waits_for_it() {
    // 4 KiB then 2 KiB: 84, then 32 more ticks of drain: 116.
    assert_eq!(
        one_link_arrivals(&[4096, 2048]),
        [vec![84, 116], vec![84, 116]]
    );
}

#[test]
fn a_shared_link_serves_the_earlier_turn_first() {
    // Nodes 0-1-2-3: links 0-1 and 1-2 of 256 B/tick (L = 10), 2-3 of
    // 64 B/tick (L = 20); one 4 KiB packet a message, so each link is a leg
    // of its own. 1→3's leg on 2-3 takes its turn at 26, when its packet
    // reaches the link, and drains at 64 B/tick until 90; 0→3's reaches the
    // link at 52, waits until 90 and drains by 154. Both arrive 20 ticks
    // after their drain, as in packet mode, which serves the shared link
    // first come first served: 1→3 at 110, 0→3 at 174.
    let classes = [
        class(256, 10, 1 << 20),
        class(256, 10, 1 << 20),
        class(64, 20, 1 << 20),
    ];
    let [packet, flow] = on_line(&classes, |t| {
        t.add(NodeId(0), NodeId(3), 4096, Start::At(0));
        t.add(NodeId(1), NodeId(3), 4096, Start::At(0));
    });
    assert_eq!(packet.arrivals, vec![174, 110]);
    assert_eq!(flow.arrivals, vec![174, 110]);
    assert_eq!(flow.stats, packet.stats);
}

#[test]
fn a_leg_takes_its_turn_when_the_message_reaches_it() {
    // Nodes 0-1-2, links of 100 B/tick with L = 300, 4 KiB packets; 64 KiB
    // from 0 to 2 and from 1 to 2 at tick 0, and from 0 to 1 at 400. Link
    // 1-2 carries 1→2's packets from tick 0, so 0→2's reach it at 341
    // and wait until 656; link 0-1 carries 0→2's from tick 0, so 0→1's
    // wait there until 656. Packets: 0→2 arrives at 656 + 656 + 300 =
    // 1612, 1→2 at 956, 0→1 at 1612. Each link is a leg of its own (341
    // ticks from one to the next): 0→2's leg on 0-1 drains from tick 0 and
    // its leg on 1-2 takes its turn at 341, behind 1→2; the same ticks.
    // As one flow, 0→2 would hold both links in one window, 656 to 1312,
    // when its bytes have long left link 0-1, and 0→1 would wait there for
    // it: 2012.
    let classes = [class(100, 300, 4096), class(100, 300, 4096)];
    let traffic = || {
        let mut t = ScheduledTraffic::new();
        t.add(NodeId(0), NodeId(2), 65_536, Start::At(0));
        t.add(NodeId(1), NodeId(2), 65_536, Start::At(0));
        t.add(NodeId(0), NodeId(1), 65_536, Start::At(400));
        t
    };
    let [packet, flow] = BOTH.map(|m| run(&mut line(&classes, m), traffic()));
    assert_eq!(packet.arrivals, vec![1612, 956, 1612]);
    assert_eq!(flow.arrivals, packet.arrivals);
    assert_eq!(flow.stats, packet.stats);
    let mut whole = line(&classes, NetworkModel::Flow);
    whole.set_flow_leg_span(LegSpan(u64::MAX));
    assert_eq!(run(&mut whole, traffic()).arrivals, vec![1612, 956, 2012]);
}

#[test]
fn a_message_sent_on_a_busy_route_queues_behind_it_and_arrives_once() {
    // The 64,000 B message is sent at 88 (the first arrival, 84, plus 4);
    // its route still drains the 2 KiB message until 116, so it drains
    // behind it for 1000 ticks and arrives at 1116, as in packet mode.
    let mut t = ScheduledTraffic::new();
    let first = t.add(NodeId(0), NodeId(1), 4096, Start::At(0));
    t.add(NodeId(0), NodeId(1), 2048, Start::At(0));
    let after = Start::After {
        after: first,
        delay: 4,
    };
    t.add(NodeId(0), NodeId(1), 64_000, after);
    let flow = run(
        &mut line(&[class(64, 20, 1 << 20)], NetworkModel::Flow),
        t.clone(),
    );
    let packet = run(
        &mut line(&[class(64, 20, 1 << 20)], NetworkModel::Packet),
        t,
    );
    assert_eq!(flow.arrivals, vec![84, 116, 1116]);
    assert_eq!(packet.arrivals, flow.arrivals);
    assert_eq!(flow.counters.delivered, 3);
}

#[test]
fn a_parking_lot_of_one_turn_drains_in_message_order() {
    // 0→1 at 100 B/tick, 1→2 at 60, L = 10; 6000 B each, one leg a
    // message. The long flow 0→2 starts at 0; its last byte leaves 1→2 at
    // 170 alone, so it waits 170 − 6000/60 = 70; the short ones start at
    // 70 and wait none: all take their turn at 70, served in message
    // order. The long one drains at its bottleneck, 60, and arrives alone
    // (180); the short one on 1→2 waits for it until 170 and arrives at
    // 280, both as in packet mode. The short one on 0→1 drains at the 40
    // left there until 170 (4000 B), then at 100 (190) and arrives at 200:
    // one flow a message holds 0→1 while its bytes are on 1→2; in packet
    // mode, where the long message left 0→1 at 60, it arrives at 140.
    let classes = [class(100, 10, 1 << 20), class(60, 10, 1 << 20)];
    let traffic = || {
        let mut t = ScheduledTraffic::new();
        for (a, b, at) in [(0, 2, 0), (0, 1, 70), (1, 2, 70)] {
            t.add(NodeId(a), NodeId(b), 6000, Start::At(at));
        }
        t
    };
    let mut engine = line(&classes, NetworkModel::Flow);
    engine.set_flow_leg_span(LegSpan(u64::MAX));
    assert_eq!(run(&mut engine, traffic()).arrivals, vec![180, 200, 280]);
    let packet = run(&mut line(&classes, NetworkModel::Packet), traffic());
    assert_eq!(packet.arrivals, vec![180, 140, 280]);
}

#[test]
fn an_incast_keeps_link_statistics_of_packet_mode() {
    // Eight PEs of four cubes send 100 000 B (25 packets) to PE 0 of cube 0.
    let sys = system(|s| s.system.sips.count = 1);
    let [packet, flow] = on_machine(&sys, |m, t| {
        for cube in 0..4 {
            for pe in 0..2 {
                if (cube, pe) != (0, 0) {
                    t.add(
                        m.pe_node(0, cube, pe),
                        m.pe_node(0, 0, 0),
                        100_000,
                        Start::At(0),
                    );
                }
            }
        }
        t.add(
            m.pe_node(0, 3, 7),
            m.pe_node(0, 0, 0),
            100_000,
            Start::At(0),
        );
    });
    assert_eq!(flow.stats, packet.stats);
    assert_eq!(flow.counters, packet.counters);
    assert!(flow.stats.iter().any(|s| s.packets == 8 * 25));
}

#[test]
fn an_all_to_all_on_a_ring_keeps_link_statistics_of_packet_mode() {
    let mut spec = lean(6, SipTopology::Ring1d, None).spec;
    spec.links.inter_sip.packet_bytes = 4096;
    let sys = System::from_spec(spec, "test").unwrap();
    let [packet, flow] = on_machine(&sys, |m, t| {
        for a in 0..6 {
            for b in (0..6).filter(|&b| b != a) {
                t.add(
                    m.pe_node(a, 0, 0),
                    m.pe_node(b, 0, 0),
                    65_536 + 100 * u64::from(a),
                    Start::At(0),
                );
            }
        }
    });
    assert_eq!(flow.stats, packet.stats);
    assert_eq!(flow.counters, packet.counters);
    // Contended: the last message arrives after the longest one would take
    // alone (3 hops of L = 300 and 4096 B packets at 100 B/tick: 17 packets,
    // 3·300 + 16·41 + ⌈500/100⌉ + 2·41 = 1643), and after the busiest lane's
    // busy time.
    let end = |o: &Outcome| o.arrivals.iter().copied().max().unwrap();
    let busiest = flow.stats.iter().map(|s| s.busy).max().unwrap();
    assert!(end(&flow) > 1643.max(busiest), "{}", end(&flow));
    // Flows take bandwidth only after their latency phase, so the lanes'
    // work staggers as the packets' does: the end is within 1 %.
    let (f, p) = (end(&flow), end(&packet));
    assert!(f.abs_diff(p) * 100 <= p, "flow {f} vs packet {p}");
}

#[test]
fn flow_runs_are_bit_identical() {
    let make = |t: &mut ScheduledTraffic| {
        for i in 0..20u32 {
            let (src, dst) = (i % 7, (i * 5 + 3) % 9);
            t.add(
                NodeId(src),
                NodeId(dst),
                1000 + 37 * u64::from(i),
                Start::At(u64::from(i % 3)),
            );
        }
    };
    let classes = vec![class(16, 3, 256); 8];
    let outcome = || {
        let mut t = ScheduledTraffic::new();
        make(&mut t);
        run(&mut line(&classes, NetworkModel::Flow), t)
    };
    let (a, b) = (outcome(), outcome());
    assert_eq!(a, b);
    // Message 6 goes from node 6 to itself: it arrives when it starts.
    assert_eq!(a.arrivals[6], 0);
    assert!(a.arrivals.iter().filter(|&&t| t > 0).count() == 19);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random incasts onto node 0 of a 4-link line: no flow arrives before
    /// its message's uncontended time (the tick it takes alone in packet mode).
    #[test]
    fn no_flow_beats_its_uncontended_time(
        msgs in prop::collection::vec((1u32..5, 0u64..20_000, 0u64..40), 1..7),
        packet_bytes in 256u64..8192,
    ) {
        let classes = [
            class(64, 5, packet_bytes),
            class(16, 30, packet_bytes),
            class(100, 2, packet_bytes),
            class(32, 11, packet_bytes),
        ];
        let mut t = ScheduledTraffic::new();
        for &(src, bytes, at) in &msgs {
            t.add(NodeId(src), NodeId(0), bytes, Start::At(at));
        }
        let flow = run(&mut line(&classes, NetworkModel::Flow), t);
        for (&(src, bytes, at), &arrived) in msgs.iter().zip(&flow.arrivals) {
            let mut alone = ScheduledTraffic::new();
            alone.add(NodeId(src), NodeId(0), bytes, Start::At(at));
            let alone = run(&mut line(&classes, NetworkModel::Packet), alone).arrivals[0];
            prop_assert!(arrived >= alone, "{bytes} B from {src} at {at}: {arrived} < {alone}");
        }
    }
}

/// A ring all-reduce of `bytes` per rank in `chunks` over 4 SIPs of 2 cubes
/// each (real NoC and UCIe links): ticks and every link's bytes.
fn all_reduce(model: NetworkModel, chunks: u32, bytes: u64) -> (u64, Vec<u64>) {
    let sys = with_model(
        &system(|s| {
            s.system.sips.count = 4;
            (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 1);
        }),
        model,
    );
    let mut config = common::algo_config("ring", Space::Tcm, chunks);
    config.slot_size = 1 << 16;
    let (mut m, c) = common::communicator(&sys, &config, DataMode::TimingOnly).unwrap();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: (bytes / 2) as usize,
    };
    let ticks = c.run(&mut m, job).unwrap().ticks;
    let links = m.engine.links();
    (ticks, links.ids().map(|l| links.stats(l).bytes).collect())
}

#[test]
fn a_ring_all_reduce_in_flow_mode_stays_within_a_few_percent_of_packet_mode() {
    // 1 MiB per rank (256 KiB blocks) in 1 to 8 chunks. A route's
    // messages drain one after the other in both modes; with 8 chunks the 4
    // slots make every chunk wait for a credit's round trip, whose overlap
    // with the drains is where the flow model is furthest off (7 % early).
    for (chunks, within) in [(1, 0.05), (2, 0.05), (4, 0.05), (8, 0.08)] {
        let (packet_ticks, packet_bytes) = all_reduce(NetworkModel::Packet, chunks, 1 << 20);
        let (flow_ticks, flow_bytes) = all_reduce(NetworkModel::Flow, chunks, 1 << 20);
        assert_eq!(flow_bytes, packet_bytes, "{chunks} chunks");
        let gap = flow_ticks.abs_diff(packet_ticks) as f64 / packet_ticks as f64;
        assert!(
            gap <= within,
            "{chunks} chunks: flow {flow_ticks} vs packet {packet_ticks}: {gap:.3}"
        );
    }
}

/// A flow slowed by short neighbours and sped up again leaves drained
/// events of its old rates behind: the clock must not stop at them, so the
/// run ends at its last arrival (here that of packet mode, to the tick).
#[test]
fn a_run_ends_at_its_last_arrival_not_at_a_stale_drained_event() {
    let sys = system(|s| (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (1, 1));
    let ends = BOTH.map(|model| {
        let mut m = Machine::build(&with_model(&sys, model)).unwrap();
        let mut t = ScheduledTraffic::new();
        t.add(
            m.pe_node(0, 0, 0),
            m.pe_node(2, 0, 0),
            1 << 20,
            Start::At(0),
        );
        for k in 0..32 {
            t.add(
                m.pe_node(1, 0, 0),
                m.pe_node(2, 0, 0),
                4096,
                Start::At(100 * k),
            );
        }
        m.engine.set_traffic(t);
        let end = m.engine.run().unwrap().end_tick;
        let last = m
            .engine
            .traffic::<ScheduledTraffic>()
            .unwrap()
            .arrivals()
            .iter()
            .flatten()
            .max()
            .copied();
        assert_eq!(Some(end), last, "{model:?}");
        end
    });
    assert_eq!(ends, [12357, 12357]);
}
