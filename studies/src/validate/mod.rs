//! `kernbench validate`: the flow-level network checked against the exact
//! packet engine. Each case of the matrix ([`cases`]) runs once in each
//! model on its own machine; its row holds both times, the relative error,
//! whether every link carried the same bytes, and the wall time of each.
//! The summary ([`summary`]) adds the error statistics and, per
//! (collective, system, size), whether both models rank the algorithms the
//! same (Kendall τ).

pub mod cases;
pub mod summary;

use crate::sweep::study::{Inputs, PointEnv, PointFile, Record, Study, StudyPoint, rows_that_ran};
use cases::{Case, Matrix, Workload};
use kernbench_ccl::estimate::Estimate;
use kernbench_ccl::{CclConfig, Communicator, Group};
use kernbench_runtime::machine::Machine;
use kernbench_spec::spec::System;
use kernbench_spec::topology::Node;
use kernbench_systems::memory::DataMode;
use kernbench_systems::network::{LinkTable, NetworkModel};
use kernbench_systems::traffic::{ScheduledTraffic, Start};
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};
use std::path::Path;
use std::time::Instant;

/// One case run in both models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateRow {
    pub family: String,
    pub topology: String,
    pub sips: u32,
    pub cubes: String,
    /// The collective and ccl entry (empty for traffic cases).
    pub collective: String,
    pub algorithm: String,
    /// Bytes per participant, or the largest message of a traffic case.
    pub bytes: u64,
    pub packet_ticks: u64,
    pub flow_ticks: u64,
    /// (flow − packet) / packet.
    pub rel_error: f64,
    /// Every link carried the same bytes in both models.
    pub link_bytes_identical: bool,
    /// Percent of the α-β bound in each model (collectives; 0 for traffic).
    pub packet_pct_of_bound: f64,
    pub flow_pct_of_bound: f64,
    pub packet_wall_ms: f64,
    pub flow_wall_ms: f64,
}

/// What one model's run of a case gives.
struct ModelRun {
    ticks: u64,
    link_bytes: Vec<u64>,
    pct_of_bound: f64,
    wall_ms: f64,
}

/// The system of a case: the embedded default with the case's topology,
/// SIP count and cube mesh (and, with `kinds`, a second SIP kind whose
/// inter-SIP links run at half the bandwidth), in `model`.
pub fn case_system(case: &Case, model: NetworkModel) -> Result<System, String> {
    let mut base = System::embedded_default();
    base.spec.network.model = model;
    let mut set = Mapping::new();
    let mut put = |k: &str, v: Value| set.insert(Value::String(k.into()), v);
    put(
        "system.sips.topology",
        Value::String(case.topology.name().into()),
    );
    put("system.sips.count", Value::Number(case.sips.into()));
    put("sip.cube_mesh.w", Value::Number(case.cubes.0.into()));
    put("sip.cube_mesh.h", Value::Number(case.cubes.1.into()));
    if case.kinds {
        let half = format!("{}..{}", case.sips / 2, case.sips);
        let bw = base.spec.links.inter_sip.bandwidth_gbps / 2.0;
        let kinds = format!("{{ slow: [\"{half}\"] }}");
        let slow = format!("{{ slow: {{ links: {{ inter_sip: {{ bandwidth_gbps: {bw} }} }} }} }}");
        let yaml = |t: &str| serde_yaml::from_str::<Value>(t).map_err(|e| e.to_string());
        put("system.sips.kinds", yaml(&kinds)?);
        put("sip_kinds", yaml(&slow)?);
    }
    crate::sweep::plan::with_base(&base, &set, "the validation matrix").map_err(|e| e.to_string())
}

/// Bytes each link carried.
fn link_bytes(machine: &Machine) -> Vec<u64> {
    let links = machine.engine.world.resource::<LinkTable>();
    links.ids().map(|l| links.stats(l).bytes).collect()
}

/// Runs `case` in `model` on a machine of its own.
fn run_model(case: &Case, ccl: &CclConfig, model: NetworkModel) -> Result<ModelRun, String> {
    let sys = case_system(case, model)?;
    let t0 = Instant::now();
    let machine = || Machine::build_with(&sys, DataMode::TimingOnly).map_err(|e| e.to_string());
    let (ticks, pct_of_bound, link_bytes) = match &case.workload {
        Workload::Collective { entry, n_slots, .. } => {
            let mut machine = machine()?;
            let mut config = ccl.entry(entry).map_err(|(p, _)| p)?.clone();
            if let Some(n) = n_slots {
                config.n_slots = *n;
            }
            let comm = Communicator::new(&mut machine, &config).map_err(|e| e.to_string())?;
            let job = case.job().expect("a collective case has a job");
            let r = comm.run(&mut machine, job).map_err(|e| e.to_string())?;
            (r.ticks, r.pct_of_bound, link_bytes(&machine))
        }
        Workload::Traffic(messages) => {
            let mut machine = machine()?;
            let ticks = run_traffic(&mut machine, messages)?;
            (ticks, 0.0, link_bytes(&machine))
        }
        Workload::Layer { hidden, seq } => {
            let (ticks, bytes) = run_layer(&sys, ccl, (*hidden, *seq))?;
            (ticks, 0.0, bytes)
        }
    };
    Ok(ModelRun {
        ticks,
        link_bytes,
        pct_of_bound,
        wall_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}

/// One GPT layer, forward and backward, on SIP 0 with no parallelism (one
/// micro-batch).
fn layer_step(sys: &System, (hidden, seq): (usize, usize)) -> crate::train::TrainStep {
    use crate::train::{AxisOrder, DpReduce, Model, ModelShape, Parallel, Schedule, TrainStep};
    TrainStep {
        model: Model::Transformer,
        shape: ModelShape {
            hidden,
            heads: (hidden / 128).max(1),
            ffn_hidden: 4 * hidden,
            seq,
            micro_batch: 1,
            layers_per_stage: 1,
        },
        tp_options: crate::transformer::TpOptions::default(),
        parallel: Parallel {
            dp: 1,
            tp: 1,
            pp: 1,
            order: AxisOrder::default(),
        },
        schedule: Schedule::OneFOneB,
        micro_batches: 1,
        dp_reduce: DpReduce::AllReduce,
        bucket_bytes: 4 << 20,
        placement: crate::gemm::Placement::off_leader(sys.pes_per_cube()),
        seed: 1,
    }
}

/// [`layer_step`] run timing only: the step's ticks and each link's bytes.
fn run_layer(
    sys: &System,
    ccl: &CclConfig,
    shape: (usize, usize),
) -> Result<(u64, Vec<u64>), String> {
    let step = layer_step(sys, shape);
    let mode = DataMode::TimingOnly;
    let mut pg =
        crate::autotune::init_process_group(sys, ccl, "ring", mode).map_err(|e| e.to_string())?;
    let report = crate::train::train_step(&mut pg, &step, mode).map_err(|e| e.to_string())?;
    Ok((report.step, link_bytes(&pg.machine)))
}

/// Sends a traffic case's messages; the tick the last one arrived.
fn run_traffic(
    machine: &mut Machine,
    messages: &[(cases::PeAt, cases::PeAt, u64, u64)],
) -> Result<u64, String> {
    let pe = |(sip, cube, pe): cases::PeAt| machine.topology.id(Node::Pe { sip, cube, pe });
    let mut work = ScheduledTraffic::new();
    for &(src, dst, bytes, at) in messages {
        work.add(pe(src), pe(dst), bytes, Start::At(at));
    }
    machine.engine.set_traffic(work);
    let r = machine.engine.run().map_err(|e| e.to_string())?;
    Ok(r.end_tick)
}

/// Runs `case` in both models into its row.
pub fn run_case(case: &Case, ccl: &CclConfig) -> Result<ValidateRow, String> {
    let packet = run_model(case, ccl, NetworkModel::Packet)?;
    let flow = run_model(case, ccl, NetworkModel::Flow)?;
    let (collective, algorithm, bytes) = match &case.workload {
        Workload::Collective {
            collective,
            entry,
            bytes,
            ..
        } => (collective.name().to_string(), entry.clone(), *bytes),
        Workload::Traffic(m) => (
            String::new(),
            String::new(),
            m.iter().map(|x| x.2).max().unwrap_or(0),
        ),
        // The size of the layer's activations (f16).
        Workload::Layer { hidden, seq } => {
            (String::new(), String::new(), (hidden * seq * 2) as u64)
        }
    };
    Ok(ValidateRow {
        family: case.family.into(),
        topology: case.topology.name().into(),
        sips: case.sips,
        cubes: format!("{}x{}", case.cubes.0, case.cubes.1),
        collective,
        algorithm,
        bytes,
        packet_ticks: packet.ticks,
        flow_ticks: flow.ticks,
        rel_error: (flow.ticks as f64 - packet.ticks as f64) / packet.ticks.max(1) as f64,
        link_bytes_identical: packet.link_bytes == flow.link_bytes,
        packet_pct_of_bound: packet.pct_of_bound,
        flow_pct_of_bound: flow.pct_of_bound,
        packet_wall_ms: packet.wall_ms,
        flow_wall_ms: flow.wall_ms,
    })
}

/// Whether a collective case's algorithm accepts the participants of its
/// system (torus_trees needs a large enough torus); traffic cases always run.
fn runs_on_its_group(case: &Case, ccl: &CclConfig) -> bool {
    let Workload::Collective { entry, .. } = &case.workload else {
        return true;
    };
    let (Ok(sys), Ok(config)) = (case_system(case, NetworkModel::Packet), ccl.entry(entry)) else {
        return false;
    };
    kernbench_ccl::algorithms::find(&config.algorithm)
        .is_ok_and(|a| a.check_group(&Group::for_config(&sys, config)).is_ok())
}

impl StudyPoint for Case {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> String {
        format!(
            "{:016x}",
            crate::sweep::fingerprint::fnv1a(self.label().as_bytes())
        )
    }
    fn label(&self) -> String {
        Case::label(self)
    }
}

/// What a case's point file holds: its row, or the error that stopped it.
pub type ValidateRecord = Record<ValidateRow>;

/// The validation matrix as a [`Study`].
pub struct ValidateStudy {
    pub matrix: Matrix,
    pub ccl: CclConfig,
    pub cases: Vec<Case>,
}

impl ValidateStudy {
    pub fn new(matrix: Matrix) -> ValidateStudy {
        let ccl = CclConfig::embedded_default();
        let mut cases = cases::cases(matrix, &ccl);
        cases.retain(|c| runs_on_its_group(c, &ccl));
        for (i, c) in cases.iter_mut().enumerate() {
            c.index = i;
        }
        ValidateStudy { matrix, ccl, cases }
    }

    /// The estimated seconds of a case: both models' estimates of a
    /// collective or a layer, a fixed cost for the small traffic cases.
    pub fn case_seconds(&self, case: &Case) -> f64 {
        if let Workload::Layer { hidden, seq } = case.workload {
            let Ok(sys) = case_system(case, NetworkModel::Packet) else {
                return 0.05;
            };
            let e = crate::command_costs::train_step(&sys, &layer_step(&sys, (hidden, seq)));
            return e.seconds + e.flow_seconds.unwrap_or(e.seconds);
        }
        let Some(job) = case.job() else {
            return 0.05;
        };
        let Workload::Collective { entry, .. } = &case.workload else {
            return 0.05;
        };
        let (Ok(sys), Ok(config)) = (
            case_system(case, NetworkModel::Packet),
            self.ccl.entry(entry),
        ) else {
            return 0.05;
        };
        let e = Estimate::collective(&sys, config, &job, false, false);
        e.seconds + e.flow_seconds.unwrap_or(e.seconds) + 0.01
    }
}

impl Study for ValidateStudy {
    type Point = Case;
    type Row = ValidateRecord;

    fn points(&self) -> Vec<Case> {
        self.cases.clone()
    }

    fn estimate_seconds(&self, p: &Case) -> f64 {
        self.case_seconds(p)
    }

    fn axes(&self, p: &Case) -> Vec<(String, String)> {
        vec![("case".into(), p.label())]
    }

    fn run_point(&self, p: &Case, _env: &PointEnv) -> ValidateRecord {
        Record::of(p, run_case(p, &self.ccl))
    }

    fn failed(&self, p: &Case, error: String) -> ValidateRecord {
        Record::of(p, Err(error))
    }

    fn progress_note(&self, row: &ValidateRecord) -> String {
        row.point.clone()
    }

    fn inputs(&self, _ccl_text: &str, _ccl_origin: &str) -> Inputs {
        let labels: Vec<String> = self.cases.iter().map(Case::label).collect();
        Inputs::with_embedded_ccl(
            labels.join("\n"),
            format!("the {} validation matrix", self.matrix.name()),
            System::embedded_default().to_yaml(),
        )
    }

    fn write_tables(
        &self,
        dir: &Path,
        files: &[PointFile<ValidateRecord>],
    ) -> Result<Vec<ValidateRecord>, String> {
        let rows = rows_of(files);
        summary::write_tables(dir, &rows)?;
        Ok(files.iter().map(|f| f.row.clone()).collect())
    }

    fn write_figures(
        &self,
        dir: &Path,
        files: &[PointFile<ValidateRecord>],
    ) -> Result<Vec<String>, String> {
        summary::write_figure(dir, &rows_of(files))
    }
}

/// The rows of the cases that ran, in matrix order.
pub fn rows_of(files: &[PointFile<ValidateRecord>]) -> Vec<ValidateRow> {
    rows_that_ran(files.iter().map(|f| &f.row))
}
