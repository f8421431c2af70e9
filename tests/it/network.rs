//! Link-level timing on compiled machines (docs/model.md §Links, §Routing).

use crate::common;
use common::{lean, system};
use kernbench::machine::Machine;
use kernbench::spec::SipTopology;
use kernbench::topology::INTER_SIP;
use kernbench::workload::RingRounds;
use kernbench_systems::{ScheduledTraffic, Start};

const MIB: u64 = 1 << 20;

/// 16-SIP ring, whole-message packets, inter-SIP B = 64 B/tick, L = 100 ticks.
fn ring16() -> kernbench::spec::System {
    let mut sys = lean(16, SipTopology::Ring1d, None);
    let l = &mut sys.spec.links.inter_sip;
    (l.bandwidth_gbps, l.latency_ns, l.packet_bytes) = (64.0, 100.0, 2 * MIB);
    kernbench::spec::System::from_spec(sys.spec, "test").unwrap()
}

struct AllToAll {
    end: u64,
    arrivals: Vec<u64>,
    stats: Vec<(u8, kernbench_systems::LinkStats)>,
}

fn all_to_all(sys: &kernbench::spec::System) -> AllToAll {
    let mut m = Machine::build(sys).unwrap();
    let n = sys.n_sips();
    let mut t = ScheduledTraffic::new();
    for a in 0..n {
        for b in 0..n {
            if a != b {
                t.add(m.pe_node(a, 0, 0), m.pe_node(b, 0, 0), MIB, Start::At(0));
            }
        }
    }
    m.engine.set_traffic(t);
    let end = m.engine.run().unwrap().end_tick;
    let arrivals = m
        .engine
        .traffic::<ScheduledTraffic>()
        .unwrap()
        .arrivals()
        .iter()
        .map(|a| a.unwrap())
        .collect();
    let links = m.engine.links();
    let stats = links
        .ids()
        .map(|l| (links.class_index(l), links.stats(l)))
        .collect();
    AllToAll {
        end,
        arrivals,
        stats,
    }
}

#[test]
fn ring16_all_to_all_is_deterministic_and_conserves_bytes() {
    let sys = ring16();
    let a = all_to_all(&sys);
    let b = all_to_all(&sys);
    assert_eq!(a.end, b.end);
    assert_eq!(a.arrivals, b.arrivals);
    assert_eq!(a.stats, b.stats);

    // Every message crosses min(d, 16-d) inter-SIP links (shortest direction).
    let sip_hops: u64 = (1..16u64).map(|d| d.min(16 - d)).sum::<u64>() * 16;
    let inter: Vec<_> = a
        .stats
        .iter()
        .filter(|s| s.0 == INTER_SIP)
        .map(|s| s.1)
        .collect();
    assert_eq!(inter.len(), 32, "16 SIPs x (east + west) lanes");
    let bytes: u64 = inter.iter().map(|s| s.bytes).sum();
    let busy: u64 = inter.iter().map(|s| s.busy).sum();
    assert_eq!(bytes, sip_hops * MIB);
    assert_eq!(busy, bytes / 64, "busy time = bytes moved / bandwidth");
    for s in &inter {
        assert_eq!(s.busy * 64, s.bytes);
    }
    // Ideal links carry bytes but are never busy.
    assert!(
        a.stats
            .iter()
            .filter(|s| s.0 != INTER_SIP)
            .all(|s| s.1.busy == 0)
    );
    // No message beats its uncontended time: d hops x (L + S/B).
    assert!(a.end >= 8 * (100 + MIB / 64));
    // The busiest lane carried every byte it could not overlap.
    let max_busy = inter.iter().map(|s| s.busy).max().unwrap();
    assert!(a.end >= max_busy + 100);
}

#[test]
fn ring16_all_to_all_finish_tick_is_pinned() {
    // Shortest-direction all-to-all on a 16-ring: by symmetry every lane
    // carries the same load, sum_{d=1..8} (messages per lane crossing it).
    let a = all_to_all(&ring16());
    let inter: Vec<_> = a
        .stats
        .iter()
        .filter(|s| s.0 == INTER_SIP)
        .map(|s| s.1)
        .collect();
    let east_loads: Vec<u64> = inter.iter().map(|s| s.bytes / MIB).collect();
    // East lanes carry d=1..8 (d=8 ties go east): 1+2+...+8 = 36 message crossings; west 1+..+7 = 28.
    let mut loads = east_loads.clone();
    loads.sort_unstable();
    loads.dedup();
    assert_eq!(loads, vec![28, 36]);
    // The run ends no earlier than the busiest lane's work plus one latency.
    assert!(a.end >= 36 * (MIB / 64) + 100);
}

#[test]
fn ring_rounds_finish_at_rounds_times_one_hop() {
    // Lockstep: every round is one uncontended inter-SIP hop of L + S/B.
    let mut sys = lean(8, SipTopology::Ring1d, None);
    (
        sys.spec.links.inter_sip.bandwidth_gbps,
        sys.spec.links.inter_sip.latency_ns,
    ) = (32.0, 50.0);
    let sys = kernbench::spec::System::from_spec(sys.spec, "test").unwrap();
    let mut m = Machine::build(&sys).unwrap();
    let nodes = (0..8).map(|s| m.pe_node(s, 0, 0)).collect();
    m.engine.set_traffic(RingRounds::new(nodes, 16 * 1024, 14));
    let r = m.engine.run().unwrap();
    let per_round = 50 + 16 * 1024 / 32;
    assert_eq!(r.end_tick, 14 * per_round);
    assert_eq!(r.messages, 8 * 14);
    // 16 KiB in 4 KiB packets; pe -> router -> xsip -> xsip' -> router -> pe:
    // 5 hops per packet.
    assert_eq!(r.hops, 8 * 14 * 4 * 5);
    let w = m.engine.traffic::<RingRounds>().unwrap();
    assert!(w.finished.iter().all(|&t| t == 14 * per_round));
}

#[test]
fn packets_pipeline_through_a_real_machine_path() {
    // Default system with real NoC and UCIe: pe0 of cube 0 to pe0 of cube 1 on
    // the same SIP crosses one UCIe link and NoC links otherwise.
    let sys = system(|s| s.system.sips.count = 1);
    let mut m = Machine::build(&sys).unwrap();
    let (a, b) = (m.pe_node(0, 0, 0), m.pe_node(0, 1, 0));
    let hops = m.topology.hops(a, b).unwrap() as u64;
    let mut t = ScheduledTraffic::new();
    t.add(a, b, 200, Start::At(3));
    m.engine.set_traffic(t);
    m.engine.run().unwrap();
    let at = m
        .engine
        .traffic::<ScheduledTraffic>()
        .unwrap()
        .arrival(0)
        .unwrap();
    // 200 B < every packet size: one packet. NoC: 1024 B/tick -> 1 tick, L 2.
    // UCIe: 128 B/tick -> 2 ticks, L 10. One UCIe hop, the rest NoC.
    assert_eq!(at, 3 + (hops - 1) * (2 + 1) + (10 + 2));
}
