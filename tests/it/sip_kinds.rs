//! Heterogeneous systems: SIP kinds change the timing of exactly the SIPs
//! they list, by closed forms; bad kind specs name the kind, the SIP and
//! the fix.

use crate::common;
use kernbench::ccl::{Collective, Job, ReduceOp};
use kernbench::spec::System;
use kernbench::spec::kinds::{RateOverride, SipIds, SipKindSpec};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;
use std::collections::BTreeMap;

const B: u64 = 64; // base inter-SIP bytes per tick
const L: u64 = 100; // base inter-SIP latency, ticks
const LANES: u64 = 256; // pe.vector_lanes of the default spec

/// `lean_links(n)` with SIP 0 of kind `slow`, whose outgoing inter-SIP
/// links move `b` bytes per tick after `l` ticks.
fn one_slow_sip(n: u32, b: u64, l: u64) -> System {
    let mut s = common::lean_links(n, B, L).spec;
    let mut slow = SipKindSpec::default();
    slow.links.inter_sip = Some(RateOverride {
        bandwidth_gbps: Some(b as f64),
        latency_ns: Some(l as f64),
        ideal: None,
    });
    s.sip_kinds.insert("slow".into(), slow);
    s.system.sips.kinds = Some(BTreeMap::from([("slow".into(), vec![SipIds::One(0)])]));
    System::from_spec(s, "test").expect("test spec is valid")
}

fn ring_ticks(sys: &System, elems: usize) -> u64 {
    let mut config = common::algo_config("ring", Space::Tcm, 1);
    config.slot_size = 1 << 24;
    // A slot per step: no send waits for a credit, which from SIP 0 would
    // come back over its slow west link.
    config.n_slots = 16;
    let (mut m, c) = common::communicator(sys, &config, DataMode::Functional).unwrap();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems,
    };
    let r = c.run(&mut m, job).unwrap();
    assert_eq!(r.verified, Some(true));
    assert!(r.ticks >= r.bound_ticks, "beat its bound: {r:?}");
    r.ticks
}

/// Ring all-reduce where one link of the ring is slower (SIP 0's outgoing
/// inter-SIP link: L' ticks, B' bytes per tick). Every rank's step k waits
/// for its left neighbour's step k − 1, so the run is the longest chain of
/// 2(n − 1) consecutive hops around the ring plus the n − 1 adds; for n ≥ 3
/// the chain crosses the slow link twice, for n = 2 once:
/// T = 2·t' + (2n − 4)·t + (n − 1)·V (n ≥ 3), t' + t + V (n = 2),
/// t = L + ⌈S/(nB)⌉, t' = L' + ⌈S/(nB')⌉, V = ⌈S/(2n)/lanes⌉. Exact while
/// the slow link's transfer ⌈S/(nB')⌉ fits between two of its sends
/// (≤ t + V); past that its sends queue behind each other.
#[test]
fn ring_with_one_slow_link_closed_form() {
    for (b2, l2) in [(32u64, 100u64), (48, 400)] {
        for n in [2u64, 3, 4, 8] {
            for s in [n * 128, n * 4096] {
                let t = L + (s / n).div_ceil(B);
                let t2 = l2 + (s / n).div_ceil(b2);
                let v = (s / n / 2).div_ceil(LANES);
                let expect = if n == 2 {
                    t2 + t + v
                } else {
                    2 * t2 + (2 * n - 4) * t + (n - 1) * v
                };
                let sys = one_slow_sip(n as u32, b2, l2);
                assert_eq!(
                    ring_ticks(&sys, (s / 2) as usize),
                    expect,
                    "n={n} S={s} B'={b2} L'={l2}"
                );
            }
        }
    }
}

#[test]
fn a_slower_kind_raises_the_time_and_a_faster_one_lowers_it() {
    let elems = 4 * 4096;
    let base = ring_ticks(&common::lean_links(4, B, L), elems);
    let slower = ring_ticks(&one_slow_sip(4, B / 2, L), elems);
    let faster = ring_ticks(&one_slow_sip(4, B * 2, L / 2), elems);
    assert!(slower > base && base > faster, "{slower} {base} {faster}");
}

/// A kind that names nothing is the base: the same ticks as no kinds.
#[test]
fn an_empty_kind_changes_nothing() {
    let mut s = common::lean_links(4, B, L).spec;
    s.sip_kinds.insert("same".into(), SipKindSpec::default());
    s.system.sips.kinds = Some(BTreeMap::from([(
        "same".into(),
        vec![SipIds::Range("0..4".into())],
    )]));
    let kinded = System::from_spec(s, "test").unwrap();
    assert_eq!(
        ring_ticks(&kinded, 8192),
        ring_ticks(&common::lean_links(4, B, L), 8192)
    );
}

/// A kind's PE and memory rates reach its SIPs' PEs and memory ports.
#[test]
fn pe_and_memory_rates_follow_the_kind() {
    let yaml = |kinds: &str| {
        format!(
            "{}\nsip_kinds:\n  half:\n    pe: {{ vector_lanes: 128 }}\n    memory: {{ hbm: {{ bandwidth_gbps: 128.0 }} }}\n",
            kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
                "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
                &format!("    topology: ring_1d\n    kinds: {kinds}"),
            )
        )
    };
    let sys = System::from_yaml(&yaml("{ half: [2, \"3..4\"] }"), "t").unwrap();
    assert_eq!(sys.kinds.of(0).name, "base");
    assert_eq!(sys.kinds.of(2).pe.vector_lanes, 128);
    assert_eq!(sys.kinds.of(3).memory.hbm.bandwidth_gbps, 128.0);
    assert_eq!(sys.kinds.of(1).memory.hbm.bandwidth_gbps, 256.0);
    assert_eq!(sys.kinds.sips_of(1, 4), vec![2, 3]);
    // The round trip through YAML keeps the kinds.
    assert_eq!(
        System::from_yaml(&sys.to_yaml(), "t").unwrap().kinds,
        sys.kinds
    );
}

fn kind_error(kinds: &str, sip_kinds: &str) -> String {
    let yaml = format!(
        "{}\n{sip_kinds}",
        kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
            "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
            &format!("    topology: ring_1d\n    kinds: {kinds}"),
        )
    );
    System::from_yaml(&yaml, "k.yaml").unwrap_err().to_string()
}

#[test]
fn bad_kinds_name_the_kind_the_sip_and_the_fix() {
    let slow = "sip_kinds:\n  slow: { links: { inter_sip: { bandwidth_gbps: 50.0 } } }\n";
    let cases = [
        (
            kind_error("{ slwo: [1] }", slow),
            vec![
                "system.sips.kinds.slwo",
                "not defined under sip_kinds (defined: slow)",
                "define sip_kinds.slwo",
            ],
        ),
        (
            kind_error("{ slow: [1, 7] }", slow),
            vec![
                "system.sips.kinds.slow[1]",
                "SIP 7 of kind 'slow' does not exist",
                "SIP ids below 4",
            ],
        ),
        (
            kind_error("{ slow: [\"3..1\"] }", slow),
            vec!["system.sips.kinds.slow[0]", "range \"a..b\"", "\"0..8\""],
        ),
        (
            kind_error(
                "{ slow: [1], fast: [\"0..2\"] }",
                "sip_kinds:\n  slow: {}\n  fast: {}\n",
            ),
            vec![
                "SIP 1 is listed under kind 'fast' and kind 'slow'",
                "each SIP under one kind",
            ],
        ),
        (
            kind_error(
                "{ slow: [1] }",
                "sip_kinds:\n  slow: { links: { inter_sip: { bandwidth_gbps: 0.0 } } }\n",
            ),
            vec![
                "sip_kinds.slow.links.inter_sip.bandwidth_gbps",
                "ideal: true",
            ],
        ),
        (
            kind_error(
                "{ slow: [1] }",
                "sip_kinds:\n  slow: { pe: { vector_lanes: 0 } }\n",
            ),
            vec!["sip_kinds.slow.pe.vector_lanes"],
        ),
        (
            kind_error("{ base: [1] }", "sip_kinds:\n  base: {}\n"),
            vec!["sip_kinds.base", "reserved"],
        ),
        (
            kind_error(
                "{ slow: [1] }",
                "sip_kinds:\n  slow: { memory: { hbm: { size_bytes: 1024 } } }\n",
            ),
            vec!["sip_kinds.slow.memory.hbm", "size_bytes"],
        ),
    ];
    for (message, wanted) in cases {
        for w in wanted {
            assert!(message.contains(w), "{w:?} not in: {message}");
        }
    }
}

/// A copy with fewer SIPs keeps the kinds of the SIPs it has (ranges cut
/// at the new count) and drops the rest; added SIPs are of the base kind.
#[test]
fn with_sips_keeps_the_kinds_of_the_remaining_sips() {
    let yaml = kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
        "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
        "    topology: ring_1d\n    kinds: { half: [\"1..4\"], other: [0] }",
    ) + "\nsip_kinds:\n  half:\n    pe: { vector_lanes: 128 }\n  other:\n    pe: { vector_lanes: 64 }\n";
    let sys = System::from_yaml(&yaml, "kinds").unwrap();
    let two = sys.with_sips(2).unwrap();
    assert_eq!(two.kinds.of(0).name, "other");
    assert_eq!(two.kinds.of(1).name, "half");
    let one = sys.with_sips(1).unwrap();
    assert_eq!(one.kinds.of(0).pe.vector_lanes, 64);
    let six = sys.with_sips(6).unwrap();
    assert_eq!(six.kinds.of(3).name, "half");
    assert_eq!(six.kinds.of(5).name, "base");
}

/// `Topology::hop_class`, which the cost estimate reads, names the class the
/// link table gives every link: of each SIP's own kind, for every edge kind
/// (SIPs of 2×2 cubes on a 2×2 torus, SIPs 1 and 2 of a second kind).
#[test]
fn hop_class_names_the_class_of_every_built_link() {
    use kernbench::topology::Topology;
    let mut s = common::sweep_base(4, kernbench::spec::SipTopology::Torus2d, 2, (2, 2)).spec;
    s.sip_kinds.insert("other".into(), SipKindSpec::default());
    s.system.sips.kinds = Some(BTreeMap::from([(
        "other".into(),
        vec![SipIds::One(1), SipIds::One(2)],
    )]));
    let sys = System::from_spec(s, "test").expect("test spec is valid");
    let t = Topology::new(&sys);
    let table = t.links(&sys).unwrap();
    let mut classes = std::collections::BTreeSet::new();
    for l in table.ids() {
        let (a, b) = table.endpoints(l);
        assert_eq!(
            t.hop_class(&sys, a, b),
            table.class_index(l),
            "{} -> {}",
            t.node(a),
            t.node(b)
        );
        classes.insert(table.class_index(l));
    }
    assert_eq!(classes.len(), 8, "every edge kind of both SIP kinds");
}
