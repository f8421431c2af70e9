//! Choosing the network model from the command line: `--network` on `run`,
//! `sweep` and `bench`, a plan axis, `auto`, the estimate's advice, and the
//! `network_model` column of every result.

use crate::common::kernbench_cli;
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::estimate::{Budget, Estimate, NetworkChoice};
use kernbench::spec::{System, presets};
use kernbench::systems::network::NetworkModel;
use kernbench_runtime::message_log::MESSAGE_COLUMNS;

/// The `name` column of a CSV file's rows.
fn column(path: &std::path::Path, name: &str) -> Vec<String> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let at = r.headers().unwrap().iter().position(|h| h == name);
    let at = at.unwrap_or_else(|| panic!("no column {name} in {}", path.display()));
    r.records()
        .map(|row| row.unwrap()[at].to_string())
        .collect()
}

#[test]
fn run_records_the_network_model_of_every_row() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, want) in [
        (None, "packet"),
        (Some("flow"), "flow"),
        (Some("packet"), "packet"),
    ] {
        let csv = dir.path().join(format!("{want}-{}.csv", flag.is_some()));
        let mut args = vec![
            "run",
            "-b",
            "4K",
            "-e",
            "8K",
            "--csv",
            csv.to_str().unwrap(),
        ];
        if let Some(model) = flag {
            args.extend(["--network", model]);
        }
        let (code, out, err) = kernbench_cli(&args);
        assert_eq!(code, Some(0), "{err}");
        // The header says which model moves the bytes.
        assert!(out.contains(&format!("\n# network: {want} (")), "{out}");
        // Two sizes, two placements each.
        assert_eq!(column(&csv, "network_model"), [want; 4], "{flag:?}");
    }
}

/// The refusal of a 65,536-participant all-reduce names what would fit:
/// the fold with an estimate within the budget (docs/model.md §Fold). Flow
/// mode is not named: its messages cross five legs each, and it is
/// estimated slower than the packet engine here.
#[test]
fn a_run_refused_in_packet_mode_says_what_the_fold_would_take() {
    let (code, _, err) = kernbench_cli(&[
        "run",
        "--preset",
        "torus_4096",
        "--algorithm",
        "hier_lanes",
        "-b",
        "64M",
        "-e",
        "64M",
        "--max-time",
        "600",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("s to simulate"), "{err}");
    assert!(!err.contains("the flow-level network"), "{err}");
    let fold = "--fold (every SIP runs the same program, shifted: 16 SIPs simulated for the same ticks; docs/model.md §Fold), estimated at ";
    let at = err.find(fold).unwrap_or_else(|| panic!("{err}"));
    let seconds: f64 = err[at + fold.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(seconds < 600.0, "{err}");
}

/// The default system with 1 KiB packets on its NoC, UCIe and inter-SIP
/// links: a 64 MiB ring all-reduce sends 64 packets a message, over a few
/// legs, so flow mode is the cheaper (measured 1.4 s a run against 3.9 s).
fn small_packets() -> System {
    packets_of(1024)
}

/// The default system with `bytes` packets on its NoC, UCIe and inter-SIP links.
fn packets_of(bytes: u64) -> System {
    crate::common::system(|s| {
        for l in [&mut s.links.noc, &mut s.links.ucie, &mut s.links.inter_sip] {
            l.packet_bytes = bytes;
        }
    })
}

/// The estimate of a 64 MiB ring all-reduce on [`small_packets`] in `model`.
fn estimate(model: NetworkModel) -> Estimate {
    let mut sys = small_packets();
    sys.spec.network.model = model;
    let ccl = CclConfig::embedded_default();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 32 << 20,
    };
    Estimate::collective(&sys, ccl.entry("ring").unwrap(), &job, false, false)
}

/// A refusal for time names flow mode with its estimate only when that is
/// lower.
#[test]
fn a_refusal_names_flow_mode_only_when_it_is_cheaper() {
    let budget = Budget {
        bytes: u64::MAX,
        seconds: 1e-3,
    };
    let cheaper = estimate(NetworkModel::Packet);
    let err = cheaper.check(&budget, "knobs").unwrap_err();
    let flow = cheaper.flow_seconds.unwrap();
    assert!(flow < cheaper.seconds, "{cheaper:?}");
    assert!(
        err.contains(&format!("the flow-level network (--network flow, or network.model: flow in the spec), estimated at {flow:.0} s")),
        "{err}"
    );
    let dearer = Estimate {
        flow_seconds: Some(2.0 * cheaper.seconds),
        ..cheaper
    };
    let err = dearer.check(&budget, "knobs").unwrap_err();
    assert!(!err.contains("flow-level network"), "{err}");
    assert!(
        err.contains("or --max-time if the wait is worth it"),
        "{err}"
    );
}

#[test]
fn the_flow_estimate_is_cheaper_and_a_packet_estimate_carries_it() {
    let (packet, flow) = (estimate(NetworkModel::Packet), estimate(NetworkModel::Flow));
    assert_eq!(packet.model, NetworkModel::Packet);
    assert_eq!(packet.flow_seconds, Some(flow.seconds));
    assert_eq!(flow.flow_seconds, None);
    assert!(flow.seconds < packet.seconds, "{flow:?} vs {packet:?}");
    // The work that is not the network is the same in both.
    assert_eq!((flow.messages, flow.ops), (packet.messages, packet.ops));
}

#[test]
fn auto_picks_packet_within_the_budget_and_flow_beyond_it_where_flow_is_faster() {
    let (packet, flow) = (estimate(NetworkModel::Packet), estimate(NetworkModel::Flow));
    let ccl = CclConfig::embedded_default();
    let config = ccl.entry("ring").unwrap();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 32 << 20,
    };
    let pick = |seconds: f64| {
        let mut sys = small_packets();
        sys.spec.network.model = NetworkModel::Flow;
        let budget = Budget {
            bytes: u64::MAX,
            seconds,
        };
        NetworkChoice::Auto(budget).apply(&mut sys, config, &job, false);
        sys.spec.network.model
    };
    assert_eq!(pick(packet.seconds * 1.01), NetworkModel::Packet);
    assert_eq!(
        pick((packet.seconds + flow.seconds) / 2.0),
        NetworkModel::Flow
    );
    // With chunk-size packets every message is one packet and each hop a
    // leg: flow mode is the dearer, so auto keeps packet even over the
    // budget (its refusal names what would fit).
    let mut chunk_packets = packets_of(65536);
    let dear = Estimate::collective(&chunk_packets, config, &job, false, false);
    assert!(dear.flow_seconds.unwrap() > dear.seconds, "{dear:?}");
    let budget = Budget {
        bytes: u64::MAX,
        seconds: dear.seconds / 2.0,
    };
    NetworkChoice::Auto(budget).apply(&mut chunk_packets, config, &job, false);
    assert_eq!(chunk_packets.spec.network.model, NetworkModel::Packet);
    // A fixed choice is what it says; the spec's stays.
    let mut sys = presets::preset("mesh_16").unwrap();
    NetworkChoice::Fixed(NetworkModel::Flow).apply(&mut sys, config, &job, false);
    assert_eq!(sys.spec.network.model, NetworkModel::Flow);
    NetworkChoice::Spec.apply(&mut sys, config, &job, false);
    assert_eq!(sys.spec.network.model, NetworkModel::Flow);
}

#[test]
fn a_plan_axis_runs_both_models_and_each_row_names_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let (code, _, err) = kernbench_cli(&[
        "sweep",
        "--plan",
        "tests/data/network_axis_plan.yaml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let csv = out.join("results.csv");
    assert_eq!(column(&csv, "network_model"), ["packet", "flow"]);
    let ticks: Vec<f64> = column(&csv, "ticks")
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let error = (ticks[1] - ticks[0]).abs() / ticks[0];
    assert!(
        error <= 0.05,
        "flow {} vs packet {} ticks",
        ticks[1],
        ticks[0]
    );
}

#[test]
fn sweep_network_flag_sets_every_point_and_the_recorded_system() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "name: two\nbase:\n  system.sips.count: 4\nstudies:\n  - name: s\n    grid:\n      algorithm: [ring, tree]\n      bytes: [4K]\n",
    )
    .unwrap();
    let out = dir.path().join("r");
    let (code, _, err) = kernbench_cli(&[
        "sweep",
        "--plan",
        plan.to_str().unwrap(),
        "--network",
        "flow",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        column(&out.join("results.csv"), "network_model"),
        ["flow", "flow"]
    );
    let system = std::fs::read_to_string(out.join("system.yaml")).unwrap();
    assert!(system.contains("model: flow"), "{system}");
}

#[test]
fn bench_prints_the_kernel_ring_beside_the_ring_traffic_with_their_ratio() {
    for model in ["packet", "flow"] {
        let (code, out, err) = kernbench_cli(&[
            "bench",
            "--no-build",
            "--sips",
            "4",
            "--rounds",
            "2",
            "--bytes",
            "64",
            "--network",
            model,
        ]);
        assert_eq!(code, Some(0), "{err}");
        let line = out
            .lines()
            .find(|l| l.starts_with("kernel vs traffic: "))
            .unwrap_or_else(|| panic!("no comparison line in:\n{out}"));
        assert!(
            line.contains(" ns per chunk (send, slot, recv, credit) against "),
            "{line}"
        );
        assert!(line.ends_with('x'), "{line}");
        // A raw message of 64 B is one packet over 5 links; a chunk is
        // one over them and its credit one over the 5 back, and the 4
        // launches' 12 traversals spread over the 8 chunks: 10 + 1.5.
        let links = out
            .lines()
            .find(|l| l.trim_start().starts_with("link traversals"))
            .unwrap_or_else(|| panic!("no traversals line in:\n{out}"));
        assert!(
            links.contains("link traversals (packet-hops): 11.50 per chunk (its data's and its credit's, launches spread over the chunks) against 5.00 (2.30x); wall per traversal: "),
            "{links}"
        );
    }
}

/// `run --messages` on a 4-SIP ring of one-cube SIPs (a ring all-reduce of
/// 4 KiB: a 1 KiB chunk a step, 2(P−1) = 6 steps, out of place and in
/// place): a row per message, every chunk and credit at its closed form —
/// 8 NoC hops of 1 + 2 ticks and the inter-SIP link's ⌈bytes/100⌉ + 300 —
/// and the flow model's file identical to the packet engine's, since no
/// message is contended.
#[test]
fn run_messages_writes_a_row_per_message_at_the_closed_form_in_both_models() {
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("ring4.yaml");
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/topology.yaml"
    ))
    .unwrap()
    .replace("cube_mesh: { w: 4, h: 4 }", "cube_mesh: { w: 1, h: 1 }");
    std::fs::write(&system, spec).unwrap();
    let log = |model: &str| {
        let path = dir.path().join(format!("{model}.csv"));
        let (code, stdout, err) = kernbench_cli(&[
            "run",
            "--system",
            system.to_str().unwrap(),
            "--algorithm",
            "ring",
            "-b",
            "4K",
            "-e",
            "4K",
            "--network",
            model,
            "--messages",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        let wrote = format!("wrote {} (180 messages)\n", path.display());
        assert!(stdout.ends_with(&wrote), "{stdout}");
        std::fs::read_to_string(&path).unwrap()
    };
    let packet = log("packet");
    assert_eq!(log("flow"), packet);
    let mut r = csv::Reader::from_reader(packet.as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header, MESSAGE_COLUMNS);
    let mut count = std::collections::BTreeMap::<String, usize>::new();
    for row in r.records() {
        let row = row.unwrap();
        let tick = |i: usize| row[i].parse::<u64>().unwrap();
        assert_eq!(tick(7), tick(6) - tick(5), "{row:?}");
        let bytes = tick(4);
        let closed_form = 8 * (bytes.div_ceil(1024) + 2) + bytes.div_ceil(100) + 300;
        if matches!(&row[1], "Chunk" | "Credit") {
            assert_eq!(tick(7), closed_form, "{row:?}");
        }
        *count.entry(row[1].to_string()).or_default() += 1;
    }
    // 2 runs x 4 participants x 6 steps; every chunk returns a credit.
    assert_eq!(count["Chunk"], 48);
    assert_eq!(count["Credit"], 48);
}

/// `--messages` refuses what it cannot record, naming the flag and the fix.
#[test]
fn run_messages_refuses_a_second_recorder_several_algorithms_and_a_bad_path() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["--messages", "m.csv", "--trace", "t.json"],
            "--messages with --trace: a run takes one recorder; allowed: one of them, or the run twice",
        ),
        (
            &["--messages", "m.csv", "--algorithm", "all"],
            "--messages with --algorithm all: a record follows one algorithm; allowed: --algorithm NAME",
        ),
        (
            &["--messages", "/nonexistent/dir/m.csv"],
            "--messages /nonexistent/dir/m.csv: cannot create the file (",
        ),
    ];
    for (args, message) in cases {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let (code, _, err) = kernbench_cli(&all);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    assert!(!std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/m.csv")).exists());
}
