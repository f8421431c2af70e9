//! Simulator benchmarks: topology build, ring traffic through the engine and
//! route computation (the route-cache miss path).
//!
//! `cargo bench --bench engine` (under a minute on 2 cores);
//! `cargo bench --bench engine -- --test` runs each benchmark once.

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use kernbench::machine::Machine;
use kernbench::spec::{System, presets};
use kernbench::topology::{Node, Topology};
use kernbench::workload::RingRounds;
use kernbench_systems::{NodeId, RouteSource};
use std::hint::black_box;
use std::time::Duration;

/// Bytes each SIP sends per ring round.
const RING_BYTES: u64 = 16384;

/// The `ring_4096_lean` preset (1 cube, 1 PE per SIP; only inter-SIP links
/// cost time) with `sips` SIPs.
fn lean_ring(sips: u32) -> System {
    let mut spec = presets::preset("ring_4096_lean").unwrap().spec;
    spec.system.sips.count = sips;
    System::from_spec(spec, "ring_4096_lean (bench)").unwrap()
}

/// A built machine with ring traffic over pe0 of every SIP's cube0 installed.
fn ring_machine(sys: &System, rounds: u64) -> Machine {
    let mut m = Machine::build(sys).unwrap();
    let nodes = (0..sys.n_sips()).map(|s| m.pe_node(s, 0, 0)).collect();
    m.engine
        .set_traffic(RingRounds::new(nodes, RING_BYTES, rounds));
    m
}

fn topology_build(c: &mut Criterion) {
    let sys = presets::preset("ring_4096").unwrap();
    let mut g = c.benchmark_group("topology_build");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(sys.total_pes()));
    // The machine is dropped outside the timed region.
    g.bench_function("ring_4096", |b| {
        b.iter_with_large_drop(|| Machine::build(black_box(&sys)).unwrap())
    });
    g.finish();
}

fn ring_traffic(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring_traffic");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for (sips, rounds) in [(4096u32, 50u64), (64, 2000)] {
        let sys = lean_ring(sips);
        assert_eq!(sys.n_sips(), sips);
        let messages = sips as u64 * rounds;
        g.throughput(Throughput::Elements(messages));
        g.bench_function(
            BenchmarkId::from_parameter(format!("{sips}x{rounds}")),
            |b| {
                b.iter_batched(
                    || ring_machine(&sys, rounds),
                    |mut m| {
                        let r = m.engine.run().unwrap();
                        assert_eq!(r.messages, messages, "every message is delivered");
                        // Returned so the machine is dropped outside the timed region.
                        (m, r)
                    },
                    BatchSize::LargeInput,
                )
            },
        );
    }
    g.finish();
}

/// `n` PE pairs of the 64x64 torus, each from a pseudo-random SIP to its
/// antipode (32 hops east/west and 32 north/south), cubes and PEs varied.
fn spread_pairs(t: &Topology, n: u32) -> Vec<(NodeId, NodeId)> {
    let (w, h) = t.grid;
    let (cubes, pes) = (t.cubes_per_sip(), t.pes_per_cube);
    (0..n)
        .map(|i| {
            let s = i.wrapping_mul(2_654_435_761) % t.sips;
            let (x, y) = (s % w, s / w);
            let d = ((y + h / 2) % h) * w + (x + w / 2) % w;
            let pe = |sip, k: u32| {
                t.id(Node::Pe {
                    sip,
                    cube: (i + k) % cubes,
                    pe: (i / cubes + k) % pes,
                })
            };
            (pe(s, 0), pe(d, 5))
        })
        .collect()
}

fn route_cache_miss(c: &mut Criterion) {
    let sys = presets::preset("torus_4096").unwrap();
    let t = Topology::new(&sys);
    let pairs = spread_pairs(&t, 1000);
    let mut g = c.benchmark_group("route_cache_miss");
    g.throughput(Throughput::Elements(pairs.len() as u64));
    g.sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let mut path = Vec::new();
    g.bench_function("torus_4096", |b| {
        b.iter(|| {
            let mut nodes = 0;
            for &(src, dst) in &pairs {
                path.clear();
                t.route(black_box(src), black_box(dst), &mut path).unwrap();
                nodes += path.len();
            }
            nodes
        })
    });
    g.finish();
}

/// One sweep point as `kernbench sweep` runs it: build the world, install the
/// wiring, run a 4 MiB all-reduce with `hier_lanes` on a 16-SIP torus of
/// one-cube SIPs (timing only).
fn sweep_point(c: &mut Criterion) {
    let yaml = "name: bench\nbase:\n  sip.cube_mesh.w: 1\n  sip.cube_mesh.h: 1\nstudies:\n  - name: p\n    grid:\n      system.sips.topology: [torus_2d]\n      system.sips.count: [16]\n      algorithm: [hier_lanes]\n      bytes: [4M]\n";
    let plan = kernbench::sweep::Plan::from_yaml(yaml, "bench").unwrap();
    let point = plan.points().remove(0);
    let mut g = c.benchmark_group("sweep_point");
    g.sample_size(10);
    g.bench_function("all_reduce_hier_lanes_torus16_4M", |b| {
        b.iter(|| {
            let r = kernbench::sweep::run::run_point(
                &plan,
                &point,
                false,
                None,
                &kernbench::estimate::Budget {
                    bytes: u64::MAX,
                    seconds: f64::INFINITY,
                },
                None,
            );
            assert!(r.row.error.is_empty());
            r.row.ticks
        })
    });
    g.finish();
}

/// Ring all-reduce through the collective library (kernels, IPCQ, credits)
/// on a lean ring of 256 SIPs: tracing to one shared program, then the run.
fn ring_all_reduce(c: &mut Criterion) {
    use kernbench::ccl::{CclConfig, Collective, Communicator, Job, ReduceOp};
    let sys = lean_ring(256);
    let ccl = CclConfig::embedded_default();
    let config = ccl.entry("ring").unwrap();
    let mut m = kernbench::machine::Machine::build_with(
        &sys,
        kernbench_systems::memory::DataMode::TimingOnly,
    )
    .unwrap();
    let comm = Communicator::new(&mut m, config).unwrap();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 2 << 20,
    };
    let mut g = c.benchmark_group("ring_all_reduce");
    g.sample_size(10);
    // Chunk transfers: 2 (p − 1) per participant.
    g.throughput(Throughput::Elements(2 * 255 * 256));
    g.bench_function("lean_ring_256_4M", |b| {
        b.iter(|| comm.run(&mut m, job).unwrap().ticks)
    });
    g.finish();
}

criterion_group!(
    benches,
    topology_build,
    ring_traffic,
    route_cache_miss,
    sweep_point,
    ring_all_reduce
);
criterion_main!(benches);
