//! The collective sweep as a [`Study`]: a plan's points, each one
//! collective run in its own world into a [`Row`]; results.csv,
//! results.json, simulator.csv and the plots from the rows.

use super::fingerprint;
use super::plan::{Plan, Point};
use super::results::{PointFile, Row};
use super::run::{HeapPeak, measured, panic_message};
use super::study::{Inputs, PointEnv, Study, StudyPoint};
use kernbench_ccl::estimate::{Budget, NetworkChoice};
use kernbench_ccl::{AUTO, AlgoConfig, Communicator};
use kernbench_systems::memory::DataMode;
use std::path::Path;

/// The files a collective sweep writes into its `--out` besides `points/`
/// and the plots: no input may be one of them.
pub const OUTPUT_FILES: [&str; 7] = [
    fingerprint::FILE,
    "plan.yaml",
    "system.yaml",
    "ccl.yaml",
    "results.csv",
    "results.json",
    "simulator.csv",
];

impl StudyPoint for Point {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> String {
        Point::id(self)
    }
    fn label(&self) -> String {
        Point::label(self)
    }
}

impl Study for Plan {
    type Point = Point;
    type Row = Row;

    fn points(&self) -> Vec<Point> {
        Plan::points(self)
    }

    /// The estimate plus a fixed cost per point (building its world,
    /// writing it).
    fn estimate_seconds(&self, p: &Point) -> f64 {
        self.estimate(p).map_or(0.0, |e| e.seconds) + 0.005
    }

    fn axes(&self, p: &Point) -> Vec<(String, String)> {
        p.assignments.clone()
    }

    fn run_point(&self, p: &Point, env: &PointEnv) -> Row {
        collective_row(self, p, self.file.verify, env.budget, env.autotune_cache)
    }

    fn failed(&self, p: &Point, error: String) -> Row {
        failed_row(p, error)
    }

    fn progress_note(&self, row: &Row) -> String {
        format!("{} {}", row.collective, row.algorithm)
    }

    fn inputs(&self, ccl_text: &str, ccl_origin: &str) -> Inputs {
        let mut system_yaml = self.system.to_yaml();
        if let NetworkChoice::Auto(_) = self.network {
            // Recorded (and fingerprinted) with the spec it applies to.
            system_yaml.push_str(
                "# network.model: auto (--network auto): packet where a point's estimate fits the budget, flow otherwise\n",
            );
        }
        Inputs {
            plan_text: self.text.clone(),
            plan_origin: self.origin.clone(),
            system_yaml: system_yaml.clone(),
            ccl_text: ccl_text.into(),
            ccl_origin: ccl_origin.into(),
            files: vec![
                ("plan.yaml", self.text.clone()),
                ("system.yaml", system_yaml),
                ("ccl.yaml", ccl_text.into()),
            ],
        }
    }

    fn write_tables(&self, dir: &Path, files: &[PointFile]) -> Result<Vec<Row>, String> {
        super::results::write_tables(dir, files)
    }

    fn write_figures(&self, dir: &Path, files: &[PointFile]) -> Result<Vec<String>, String> {
        super::plots::write_all(dir, files)
    }
}

/// Runs one point in its own world; failures become rows with an error.
/// With a heap counter and one job, `peak_mb` is the point's own peak heap;
/// with several jobs it is the peak while the point ran.
pub fn run_point(
    plan: &Plan,
    p: &Point,
    verify: bool,
    heap: Option<HeapPeak>,
    budget: &Budget,
    autotune_cache: Option<&Path>,
) -> PointFile {
    measured(
        heap,
        p.assignments.clone(),
        || collective_row(plan, p, verify, budget, autotune_cache),
        |e| failed_row(p, e),
    )
}

/// A point's row: its collective run in its own world, or the error that
/// stopped it (a panic included: the fields resolved before it are kept).
fn collective_row(
    plan: &Plan,
    p: &Point,
    verify: bool,
    budget: &Budget,
    autotune_cache: Option<&Path>,
) -> Row {
    let mut row = blank_row(p);
    let simulate = || -> Result<(), String> {
        let mut r = plan.resolve(p)?;
        if r.config.algorithm == AUTO {
            let pick = tuned(plan, &r, autotune_cache)?;
            row.autotuned = pick.name.clone();
            r.config = AlgoConfig {
                name: AUTO.into(),
                ..pick
            };
        }
        let s = &r.system.spec;
        row.topology = s.system.sips.topology.name().into();
        row.sips = Some(s.system.sips.count);
        row.tick_ns = Some(s.system.tick_ns);
        row.packet_bytes = Some(s.links.inter_sip.packet_bytes);
        row.network_model = s.network.model.name().into();
        row.grid = format!("{}x{}", r.system.sip_grid.0, r.system.sip_grid.1);
        row.cubes = format!("{}x{}", s.sip.cube_mesh.w, s.sip.cube_mesh.h);
        row.collective = r.collective.name().into();
        row.algorithm = r.config.name.clone();
        row.implementation = r.config.algorithm.clone();
        row.buffer_kind = r.config.buffer_kind.name().into();
        (row.n_slots, row.slot_size, row.chunks) = (
            Some(r.config.n_slots),
            Some(r.config.slot_size),
            r.config.chunks.to_string(),
        );
        row.op = r.op.name().into();
        row.bytes = Some(r.bytes);
        let mode = if verify {
            DataMode::Functional
        } else {
            DataMode::TimingOnly
        };
        let job = r.job();
        Communicator::check_before_build(&r.system, &r.config, &job).map_err(|e| e.to_string())?;
        // A fold that does not apply runs the whole machine; a refusal says why.
        let (system, unfolded) = r.simulated_system(&r.config, verify);
        r.system = system;
        row.simulated_sips = Some(r.system.n_sips());
        kernbench_ccl::estimate::Estimate::collective(&r.system, &r.config, &job, verify, false)
            .check(budget, "larger packet_bytes or slot_size, fewer chunks, a smaller size, fewer SIPs or cubes, fewer --jobs")
            .map_err(|e| match &unfolded {
                Some(why) => format!("{e} (simulation.fold does not apply: {why})"),
                None => e,
            })?;
        let mut machine = kernbench_runtime::machine::Machine::build_with(&r.system, mode)
            .map_err(|e| e.to_string())?;
        let comm = Communicator::new(&mut machine, &r.config).map_err(|e| e.to_string())?;
        row.participants = Some(comm.group.size());
        let res = comm.run(&mut machine, job).map_err(|e| e.to_string())?;
        row.ticks = Some(res.ticks);
        row.time_us = Some(res.time_ns / 1000.0);
        row.algbw_gbps = Some(res.algbw_gbps);
        row.busbw_gbps = Some(res.busbw_gbps);
        row.bound_ticks = Some(res.bound_ticks);
        row.pct_of_bound = Some(res.pct_of_bound);
        row.bound_term = res.bound_term;
        row.verified = match res.verified {
            Some(true) => "ok",
            Some(false) => "WRONG",
            None => "-",
        }
        .into();
        Ok(())
    };
    // A panic is a bug, not an outcome: it becomes this point's error and the
    // sweep goes on.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(simulate))
        .unwrap_or_else(|payload| Err(format!("panicked: {}", panic_message(&*payload))));
    if let Err(e) = result {
        row.error = e.replace('\n', " | ");
    }
    row
}

/// The row of a point whose run panicked outside its simulation.
fn failed_row(p: &Point, error: String) -> Row {
    Row {
        error: error.replace('\n', " | "),
        ..blank_row(p)
    }
}

/// The configuration the tuner picks for an `auto` point's collective and
/// bytes on its system (from the cache when it holds the bucket).
fn tuned(
    plan: &Plan,
    r: &super::plan::Resolved,
    cache: Option<&Path>,
) -> Result<AlgoConfig, String> {
    let mut tuner = crate::autotune::Tuner::new(&r.system, &plan.ccl);
    if let Some(dir) = cache {
        tuner = tuner.with_cache(dir, false);
    }
    let d = tuner
        .decide(r.collective, r.bytes)
        .map_err(|e| format!("algorithm auto: {e}"))?;
    Ok(tuner.config(&d).clone())
}

/// A point's row before it runs: its identity and the axes a row has a
/// column for; every result field empty until the run fills it.
fn blank_row(p: &Point) -> Row {
    let mut row = Row {
        index: p.index,
        id: p.id(),
        study: p.study.clone(),
        point: p.label(),
        topology: String::new(),
        sips: None,
        grid: String::new(),
        cubes: String::new(),
        packet_bytes: None,
        tick_ns: None,
        network_model: String::new(),
        simulated_sips: None,
        participants: None,
        collective: String::new(),
        algorithm: String::new(),
        implementation: String::new(),
        buffer_kind: String::new(),
        n_slots: None,
        slot_size: None,
        chunks: String::new(),
        op: String::new(),
        dtype: crate::nccl_table::DTYPE.into(),
        bytes: None,
        ticks: None,
        time_us: None,
        algbw_gbps: None,
        busbw_gbps: None,
        bound_ticks: None,
        pct_of_bound: None,
        bound_term: String::new(),
        autotuned: String::new(),
        verified: String::new(),
        error: String::new(),
    };
    // The axes a row has a column for keep the point's values if it fails.
    for (k, v) in &p.assignments {
        match k.as_str() {
            "collective" => row.collective = v.clone(),
            "algorithm" => row.algorithm = v.clone(),
            "op" => row.op = v.clone(),
            "bytes" => row.bytes = super::plan::parse_bytes(v).ok(),
            _ => {}
        }
    }
    row
}
