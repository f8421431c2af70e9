//! Closed-form link timing (docs/model.md §Links) on a line of identical links.

use kernbench_systems::{
    Engine, LinkClass, LinkTableBuilder, NodeId, RouteSource, ScheduledTraffic, Start,
};

/// Nodes 0..n on a line; the route walks the line.
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

fn line(nodes: u32, c: LinkClass) -> Engine {
    let mut b = LinkTableBuilder::new(nodes, vec![c]);
    for i in 0..nodes - 1 {
        b.duplex(NodeId(i), NodeId(i + 1), 0);
    }
    Engine::new(b.build(), Box::new(Line))
}

fn run(mut e: Engine, t: ScheduledTraffic) -> (Engine, Vec<u64>) {
    e.set_traffic(t);
    e.run().unwrap();
    let arrivals = e
        .traffic::<ScheduledTraffic>()
        .unwrap()
        .arrivals()
        .iter()
        .map(|a| a.expect("every message arrives"))
        .collect();
    (e, arrivals)
}

/// The pipelined closed form of docs/model.md: n = ⌈s/P⌉ packets, last one s_l bytes.
fn closed_form(k: u64, s: u64, p: u64, b: u64, l: u64) -> u64 {
    let n = s.div_ceil(p);
    let last = s - (n - 1) * p;
    let t = p.div_ceil(b);
    let t_last = last.div_ceil(b);
    let t_first = s.min(p).div_ceil(b);
    k * l + (k - 1) * t_first + (n - 1) * t + t_last
}

#[test]
fn one_packet_over_k_hops_is_k_times_latency_plus_serialisation() {
    for (k, s, b, l) in [
        (1, 1000, 7, 3),
        (4, 4096, 64, 10),
        (9, 1, 1, 0),
        (6, 12_345, 100, 250),
    ] {
        let mut t = ScheduledTraffic::new();
        t.add(NodeId(0), NodeId(k as u32), s, Start::At(0));
        let (_, a) = run(line(k as u32 + 1, class(b, l, 1 << 40)), t);
        assert_eq!(a[0], k * (l + s.div_ceil(b)), "k={k} s={s} B={b} L={l}");
    }
}

#[test]
fn packets_pipeline_across_hops_per_the_closed_form() {
    for (k, s, p, b, l) in [
        (1, 4096, 1024, 64, 5),
        (3, 4096, 1024, 64, 5),
        (5, 10_000, 1024, 64, 7), // short last packet
        (4, 1_000_000, 4096, 100, 300),
        (2, 100, 64, 3, 0),
    ] {
        let mut t = ScheduledTraffic::new();
        t.add(NodeId(0), NodeId(k as u32), s, Start::At(0));
        let (_, a) = run(line(k as u32 + 1, class(b, l, p)), t);
        assert_eq!(
            a[0],
            closed_form(k, s, p, b, l),
            "k={k} s={s} P={p} B={b} L={l}"
        );
    }
}

#[test]
fn two_messages_on_one_link_arrive_one_serialisation_apart() {
    let (s, b, l) = (4096, 64, 20);
    let mut t = ScheduledTraffic::new();
    t.add(NodeId(0), NodeId(1), s, Start::At(0));
    t.add(NodeId(0), NodeId(1), s, Start::At(0));
    let (_, a) = run(line(2, class(b, l, 1 << 40)), t);
    assert_eq!(a[0], l + s / b);
    assert_eq!(a[1] - a[0], s.div_ceil(b));
}

#[test]
fn n_messages_into_one_link_serialise_in_injection_order() {
    let (s, b, l, n) = (1000u64, 10u64, 4u64, 12u64);
    let mut t = ScheduledTraffic::new();
    // All n messages want link 12→13 at tick 0; the tie order is message id.
    for _ in 0..n {
        t.add(NodeId(12), NodeId(13), s, Start::At(0));
    }
    let (_, a) = run(line(14, class(b, l, 1 << 40)), t);
    for (i, &at) in a.iter().enumerate() {
        assert_eq!(at, l + (i as u64 + 1) * (s / b), "message {i}");
    }
}

#[test]
fn link_stats_count_busy_ticks_bytes_and_packets() {
    let mut t = ScheduledTraffic::new();
    t.add(NodeId(0), NodeId(2), 1000, Start::At(0));
    let (e, _) = run(line(3, class(10, 1, 300)), t);
    let links = e.links();
    let l01 = links.find(NodeId(0), NodeId(1)).unwrap();
    let st = links.stats(l01);
    assert_eq!(
        (st.bytes, st.packets, st.busy),
        (1000, 4, 30 + 30 + 30 + 10)
    );
    assert_eq!(
        links
            .stats(links.find(NodeId(1), NodeId(0)).unwrap())
            .packets,
        0
    );
}

#[test]
fn dependent_message_starts_when_its_predecessor_arrives() {
    let mut t = ScheduledTraffic::new();
    let first = t.add(NodeId(0), NodeId(3), 640, Start::At(5));
    t.add(
        NodeId(3),
        NodeId(0),
        640,
        Start::After {
            after: first,
            delay: 2,
        },
    );
    let (_, a) = run(line(4, class(64, 10, 1 << 20)), t);
    assert_eq!(a[0], 5 + 3 * (10 + 10));
    assert_eq!(a[1], a[0] + 2 + 3 * (10 + 10));
}

#[test]
fn ideal_links_cost_nothing_and_are_never_contended() {
    let mut c = class(1, 100, 64);
    c.ideal = true;
    let mut t = ScheduledTraffic::new();
    t.add(NodeId(0), NodeId(5), 1 << 20, Start::At(7));
    t.add(NodeId(0), NodeId(5), 1 << 20, Start::At(7));
    let (e, a) = run(line(6, c), t);
    assert_eq!(a, vec![7, 7]);
    let st = e
        .links()
        .stats(e.links().find(NodeId(0), NodeId(1)).unwrap());
    assert_eq!(
        (st.busy, st.bytes),
        (0, 0),
        "ideal links keep no per-link record"
    );
    let run = e
        .world
        .resource::<kernbench_systems::network::NetCounters>();
    assert_eq!((run.hops, run.ideal_hops), (2 * 5, 2 * 5));
}

#[test]
fn runs_are_bit_identical() {
    let make = || {
        let mut t = ScheduledTraffic::new();
        for i in 0..20u32 {
            t.add(
                NodeId(i % 7),
                NodeId((i * 5 + 3) % 9),
                1000 + 37 * i as u64,
                Start::At((i % 3) as u64),
            );
        }
        t
    };
    let (e1, a1) = run(line(9, class(16, 3, 256)), make());
    let (e2, a2) = run(line(9, class(16, 3, 256)), make());
    assert_eq!(a1, a2);
    for l in e1.links().ids() {
        assert_eq!(e1.links().stats(l), e2.links().stats(l));
    }
}

#[test]
fn the_watchdog_stops_a_run_past_max_ticks_with_a_report() {
    use kernbench_systems::{RunError, RunLimits};
    let mut e = line(3, class(1, 10, 1 << 20));
    e.world.insert_resource(RunLimits {
        max_ticks: Some(100),
        stall_steps: 1_000_000,
    });
    let mut t = ScheduledTraffic::new();
    // 1000 bytes at 1 B/tick: arrives at tick 2 * (10 + 1000), past 100.
    t.add(NodeId(0), NodeId(2), 1000, Start::At(0));
    e.set_traffic(t);
    match e.run() {
        Err(RunError::Stalled(report)) => {
            assert!(
                report.starts_with("run stopped: the clock passed --max-ticks 100 (at tick 1010)"),
                "{report}"
            );
        }
        other => panic!("expected the watchdog, got {other:?}"),
    }
}

#[test]
fn the_watchdog_stops_a_run_without_progress() {
    use kernbench_systems::{RunError, RunLimits};
    let mut e = line(2, class(1, 10, 1 << 20));
    e.world.insert_resource(RunLimits {
        max_ticks: None,
        stall_steps: 1,
    });
    let mut t = ScheduledTraffic::new();
    // Nothing moves at tick 0 (the message starts at tick 500).
    t.add(NodeId(0), NodeId(1), 8, Start::At(500));
    e.set_traffic(t);
    match e.run() {
        Err(RunError::Stalled(report)) => assert!(
            report.starts_with("run stopped: nothing moved (no packet hop, delivery or op issued) for 1 visited ticks"),
            "{report}"
        ),
        other => panic!("expected the watchdog, got {other:?}"),
    }
    // With the default limits the same run finishes: 500 + 10 + 8.
    let mut t = ScheduledTraffic::new();
    t.add(NodeId(0), NodeId(1), 8, Start::At(500));
    let (_, arrivals) = run(line(2, class(1, 10, 1 << 20)), t);
    assert_eq!(arrivals, vec![518]);
}
