//! Helpers shared by the system-level tests.
#![allow(dead_code)]

use kernbench::machine::Machine;
use kernbench::spec::{SipTopology, System, SystemSpec};
use kernbench_systems::ipcq::Scope;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{Launch, Op, Program};
use std::sync::Arc;

/// The embedded default spec, edited by `f`, validated.
pub fn system(f: impl FnOnce(&mut SystemSpec)) -> System {
    let mut spec = System::embedded_default().spec;
    f(&mut spec);
    System::from_spec(spec, "test").expect("test spec is valid")
}

/// The default sweep's base on `n` SIPs of `topology` (a `side`×`side` grid
/// unless a ring) with `cubes` per SIP: 64 KiB packets on every on-chip and
/// inter-SIP link.
pub fn sweep_base(n: u32, topology: SipTopology, side: u32, cubes: (u32, u32)) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        let grid = (topology != SipTopology::Ring1d).then_some(side);
        (s.system.sips.w, s.system.sips.h) = (grid, grid);
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
        for l in [&mut s.links.noc, &mut s.links.ucie, &mut s.links.inter_sip] {
            l.packet_bytes = 65536;
        }
    })
}

/// `n` SIPs of one cube with one PE; every edge kind but inter-SIP ideal, so
/// only inter-SIP links cost time.
pub fn lean(n: u32, topology: SipTopology, grid: Option<(u32, u32)>) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
        s.sip.cube_mesh.w = 1;
        s.sip.cube_mesh.h = 1;
        s.cube.pe_layout.pe_per_corner = 1;
        s.cube.pe_layout.corners = 1;
        s.cube.noc_mesh.w = 1;
        s.cube.noc_mesh.h = 1;
        for l in [&mut s.links.noc, &mut s.links.ucie, &mut s.links.pcie] {
            l.ideal = true;
        }
    })
}

/// `lean` with inter-SIP links of `b` bytes/tick and `l` ticks, whole-message
/// packets and ideal memories (a 1 GiB TCM holds any test's slot areas): only
/// inter-SIP links and PE compute cost time.
pub fn lean_links(n: u32, b: u64, l: u64) -> System {
    let mut s = lean(n, SipTopology::Ring1d, None).spec;
    let link = &mut s.links.inter_sip;
    (link.bandwidth_gbps, link.latency_ns, link.packet_bytes) = (b as f64, l as f64, 1 << 30);
    for m in [&mut s.memory.tcm, &mut s.memory.sram, &mut s.memory.hbm] {
        m.ideal = true;
    }
    // Closed forms assume enough slots: room for large slot areas.
    s.memory.tcm.size_bytes = 1 << 30;
    System::from_spec(s, "test").expect("test spec is valid")
}

/// A machine of `sys` (in `mode`) with `config`'s wiring installed over
/// every SIP.
pub fn communicator(
    sys: &System,
    config: &kernbench::ccl::AlgoConfig,
    mode: kernbench_systems::memory::DataMode,
) -> Result<(kernbench::machine::Machine, kernbench::ccl::Communicator), kernbench::ccl::CclError> {
    let mut m = kernbench::machine::Machine::build_with(sys, mode)
        .map_err(|e| kernbench::ccl::CclError::Config(e.to_string()))?;
    let c = kernbench::ccl::Communicator::new(&mut m, config)?;
    Ok((m, c))
}

/// A collective configuration of `algorithm` with receive slots in
/// `buffer` (4 slots of 4 KiB) and a fixed pipeline depth.
pub fn algo_config(
    algorithm: &str,
    buffer: kernbench::topology::address::Space,
    chunks: u32,
) -> kernbench::ccl::AlgoConfig {
    kernbench::ccl::AlgoConfig {
        name: algorithm.into(),
        algorithm: algorithm.into(),
        buffer_kind: buffer,
        n_slots: 4,
        slot_size: 4096,
        chunks: kernbench::ccl::Chunks::Fixed(chunks),
        world_size: None,
        mapper: "leader_only".into(),
        validator: None,
    }
}

/// Runs the `kernbench` binary from the workspace root: (exit code,
/// stdout, stderr).
pub fn kernbench_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the kernbench binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The error a hand-written program of `ops` over `regs` registers ends
/// with on SIP 0's PE 0 of `sys` (timing only): the engine's own checks.
pub fn program_error(sys: &System, ops: Vec<Op>, regs: u16) -> String {
    let mut m = Machine::build_with(sys, DataMode::TimingOnly).unwrap();
    let pe = m.pe_index(0, 0, 0);
    let program = Program {
        ops,
        regs,
        ..Program::default()
    };
    let launch = Launch {
        program: Arc::new(program),
        params: Box::new([]),
    };
    let h = m
        .submit_programs(vec![(pe, launch)], Scope::DEFAULT, 0)
        .unwrap();
    m.wait(h).unwrap_err().to_string()
}
