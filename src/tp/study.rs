//! `kernbench sweep --plan tp`: the TP scaling study. A TP plan
//! (`workload: tp_block`, configs/sweeps/tp.yaml) runs [`run_block`] for
//! every topology × hidden × TP of its grid, on a system of TP SIPs, and
//! writes results.csv and three figures: time per block, the communication
//! share of it, and the scaling efficiency (speedup over TP = 1 / TP).

use super::block::{BlockShape, run_block};
use crate::ccl::CclConfig;
use crate::output::write_file;
use crate::spec::{SipTopology, SpecError, System, parse_yaml};
use crate::sweep::plan::{TP_PLAN, with_base};
use crate::sweep::plots::{Series, chart};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_yaml::Mapping;
use std::path::Path;

/// What a TP plan may vary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpGrid {
    pub topology: Vec<SipTopology>,
    pub hidden: Vec<usize>,
    pub tp: Vec<u32>,
}

/// A TP scaling plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpPlan {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Must be `tp_block`.
    pub workload: String,
    /// Spec fields set on every point (dotted paths), as in sweep plans.
    #[serde(default)]
    pub base: Mapping,
    /// The ccl.yaml entry of the all-reduces.
    pub algorithm: String,
    pub tokens: usize,
    pub grid: TpGrid,
}

/// One point's result; times in µs, of rank 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpRow {
    pub topology: String,
    /// Also the SIP count: the world is one TP group.
    pub tp: u32,
    pub hidden: usize,
    pub tokens: usize,
    pub algorithm: String,
    pub time_us: f64,
    pub compute_us: f64,
    pub comm_us: f64,
    pub hidden_comm_us: f64,
    pub exposed_comm_us: f64,
    pub launch_wait_us: f64,
    /// time at TP = 1 (same topology and hidden) / time; empty without a TP = 1 point.
    pub speedup: Option<f64>,
    /// speedup / TP.
    pub efficiency: Option<f64>,
}

impl TpPlan {
    /// The plan `name_or_path` if it is a TP plan: the built-in `tp`, or a
    /// YAML file whose `workload:` is `tp_block`. None for other plans.
    pub fn find(name_or_path: &str) -> Result<Option<TpPlan>, SpecError> {
        let (text, origin) = if name_or_path == TP_PLAN.0 {
            (TP_PLAN.1.to_string(), "configs/sweeps/tp.yaml".to_string())
        } else {
            let path = Path::new(name_or_path);
            // A file that cannot be read or prepared is no TP plan; the
            // sweep plan reader reports why.
            let Ok(text) = crate::spec::input::read_config(path, "sweep plan") else {
                return Ok(None);
            };
            let Ok(ready) = crate::spec::input::prepare_yaml(&text, name_or_path) else {
                return Ok(None);
            };
            let head: serde_yaml::Value = serde_yaml::from_str(&ready).unwrap_or_default();
            if head.get("workload").and_then(|w| w.as_str()) != Some("tp_block") {
                return Ok(None);
            }
            (text, name_or_path.to_string())
        };
        let plan: TpPlan = parse_yaml(&text, &origin)?;
        crate::sweep::plan::check_name(&origin, &plan.name)?;
        let err = |path: &str, problem: String, allowed: &str| SpecError {
            file: origin.clone(),
            path: path.into(),
            line: None,
            problem,
            allowed: allowed.into(),
        };
        if plan.workload != "tp_block" {
            return Err(err(
                "workload",
                format!("unknown workload '{}'", plan.workload),
                "tp_block",
            ));
        }
        if plan.grid.topology.is_empty() || plan.grid.hidden.is_empty() || plan.grid.tp.is_empty() {
            return Err(err(
                "grid",
                "an empty axis".into(),
                "at least one value on topology, hidden and tp",
            ));
        }
        if let Some(&t) = plan.grid.tp.iter().find(|&&t| t == 0) {
            return Err(err("grid.tp", format!("tp {t}"), "TP sizes of at least 1"));
        }
        if plan.tokens == 0 {
            return Err(err("tokens", "0 tokens".into(), "at least 1"));
        }
        CclConfig::embedded_default()
            .entry(&plan.algorithm)
            .map_err(|(p, a)| err("algorithm", p, &a))?;
        Ok(Some(plan))
    }

    /// `base` with the plan's `base:` fields set.
    pub fn base_system(&self, base: &System) -> Result<System, String> {
        with_base(base, &self.base, &self.name).map_err(|e| e.to_string())
    }

    /// Points in order: topology, then hidden, then TP.
    pub fn points(&self) -> Vec<(SipTopology, usize, u32)> {
        let g = &self.grid;
        g.topology
            .iter()
            .flat_map(|&t| {
                g.hidden
                    .iter()
                    .flat_map(move |&h| g.tp.iter().map(move |&p| (t, h, p)))
            })
            .collect()
    }
}

/// Runs every point on rayon's pool; `done` is called after each.
pub fn run(
    plan: &TpPlan,
    base: &System,
    done: &(dyn Fn(usize) + Sync),
) -> Result<Vec<TpRow>, String> {
    let base = plan.base_system(base)?;
    let ccl = CclConfig::embedded_default();
    let tick_us = base.spec.system.tick_ns / 1e3;
    let mut rows = plan
        .points()
        .par_iter()
        .enumerate()
        .map(|(i, &(topology, hidden, tp))| {
            let mut spec = base.spec.clone();
            spec.system.sips.topology = topology;
            let sys = System::from_spec(spec, &base.origin)
                .and_then(|s| s.with_sips(tp))
                .map_err(|e| format!("{} x{tp}: {e}", topology.name()))?;
            let shape = BlockShape {
                tokens: plan.tokens,
                hidden,
            };
            let r = run_block(&sys, &ccl, &plan.algorithm, tp, shape)
                .map_err(|e| format!("{} x{tp}, hidden {hidden}: {e}", topology.name()))?;
            done(i);
            let b = r.breakdown;
            let us = |t: u64| t as f64 * tick_us;
            Ok(TpRow {
                topology: topology.name().into(),
                tp,
                hidden,
                tokens: plan.tokens,
                algorithm: plan.algorithm.clone(),
                time_us: us(b.total),
                compute_us: us(b.compute),
                comm_us: us(b.communication),
                hidden_comm_us: us(b.hidden),
                exposed_comm_us: us(b.communication - b.hidden),
                launch_wait_us: us(b.launch),
                speedup: None,
                efficiency: None,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let one: Vec<(String, usize, f64)> = rows
        .iter()
        .filter(|r| r.tp == 1)
        .map(|r| (r.topology.clone(), r.hidden, r.time_us))
        .collect();
    for r in &mut rows {
        if let Some(t1) = one.iter().find(|o| o.0 == r.topology && o.1 == r.hidden) {
            r.speedup = Some(t1.2 / r.time_us);
            r.efficiency = Some(t1.2 / r.time_us / f64::from(r.tp));
        }
    }
    Ok(rows)
}

/// [`run`] on a rayon pool of its own with `jobs` threads (a sweep's
/// `--jobs`), so the points in parallel are the ones asked for.
pub fn run_on(
    plan: &TpPlan,
    base: &System,
    jobs: usize,
    done: &(dyn Fn(usize) + Sync),
) -> Result<Vec<TpRow>, String> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| e.to_string())?;
    pool.install(|| run(plan, base, done))
}

/// The table a TP sweep prints: one line per point, times in µs.
pub fn table(rows: &[TpRow]) -> String {
    let mut out = format!(
        "{:>16} {:>6} {:>3} {:>12} {:>12} {:>12} {:>12} {:>8} {:>6}\n",
        "topology", "hidden", "tp", "time(us)", "compute", "comm", "launch+wait", "speedup", "eff"
    );
    for r in rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        out.push_str(&format!(
            "{:>16} {:>6} {:>3} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>8} {:>6}\n",
            r.topology,
            r.hidden,
            r.tp,
            r.time_us,
            r.compute_us,
            r.comm_us,
            r.launch_wait_us,
            opt(r.speedup),
            opt(r.efficiency)
        ));
    }
    out
}

/// What the figures' titles say of the system: its SIP and the tokens.
pub fn label(plan: &TpPlan, base: &System) -> String {
    format!(
        "{} cubes x {} PEs per SIP, {} tokens",
        base.cubes_per_sip(),
        base.pes_per_cube(),
        plan.tokens
    )
}

/// One series per (topology, hidden) over TP.
fn by_slice(rows: &[TpRow], y: &dyn Fn(&TpRow) -> Option<f64>) -> Series {
    let mut out: Series = Vec::new();
    for r in rows {
        let Some(v) = y(r) else { continue };
        let name = format!("{} h={}", r.topology, r.hidden);
        match out.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((f64::from(r.tp), v)),
            None => out.push((name, vec![(f64::from(r.tp), v)])),
        }
    }
    out
}

/// The files [`write`] puts in its directory.
pub const FILES: [&str; 4] = [
    "results.csv",
    "tp_block_time.svg",
    "tp_comm_share.svg",
    "tp_efficiency.svg",
];

/// Writes results.csv and the three figures into `dir`; returns the files.
pub fn write(dir: &Path, rows: &[TpRow], system: &str) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    write_file(&dir.join(FILES[0]), &bytes)?;
    let x = "TP size (SIPs)";
    let figures = [
        (
            FILES[1],
            "time per block, us (log)",
            true,
            by_slice(rows, &|r| Some(r.time_us)),
        ),
        (
            FILES[2],
            "communication / time per block",
            false,
            by_slice(rows, &|r| Some(r.comm_us / r.time_us)),
        ),
        (
            FILES[3],
            "speedup / TP",
            false,
            by_slice(rows, &|r| r.efficiency),
        ),
    ];
    let mut files = vec![FILES[0].to_string()];
    for (file, y, log, series) in figures {
        let title = format!("Transformer block, TP scaling ({system})");
        chart(&dir.join(file), &title, x, y, log, &series)?;
        files.push(file.into());
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tp: u32, time_us: f64, speedup: Option<f64>) -> TpRow {
        TpRow {
            topology: "ring_1d".into(),
            tp,
            hidden: 1024,
            tokens: 64,
            algorithm: "ring".into(),
            time_us,
            compute_us: 20.238,
            comm_us: 26.356,
            hidden_comm_us: 0.0,
            exposed_comm_us: 26.356,
            launch_wait_us: 6.195,
            speedup,
            efficiency: speedup.map(|s| s / f64::from(tp)),
        }
    }

    /// The lines `sweep --plan tests/data/doc/tiny_tp.yaml` prints, a point
    /// without a TP = 1 run showing `-` for speedup and efficiency.
    #[test]
    fn table_is_the_sweeps_table_to_the_byte() {
        let rows = [row(2, 52.789, Some(0.7963780333023925)), row(4, 40.0, None)];
        assert_eq!(
            table(&rows),
            "        topology hidden  tp     time(us)      compute         comm  launch+wait  speedup    eff\n\
             \x20        ring_1d   1024   2         52.8         20.2         26.4          6.2     0.80   0.40\n\
             \x20        ring_1d   1024   4         40.0         20.2         26.4          6.2        -      -\n"
        );
    }
}
