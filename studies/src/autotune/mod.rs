//! Collective autotuning: for a collective, a size bucket and a system,
//! simulate every candidate configuration (ccl.yaml's `autotune:` grid of
//! algorithm × chunks × buffer kind × n_slots × slot_size) and pick the
//! fastest; `algorithm: auto` then runs the pick. Decisions are cached on disk
//! ([`cache`]) keyed by the spec, the candidates, the collective and the
//! bucket. [`hetero`] is the heterogeneous protocol (a rank may fall back),
//! played by the ranks on the simulated machine.
//!
//! The simulator is deterministic, so one run per candidate is the
//! measurement: there are no repetitions or warm-ups to configure.

pub mod cache;
pub mod hetero;
pub mod report;

use std::collections::HashMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use cache::{Cache, CacheKey, Lookup};
use kernbench_ccl::{
    AlgoConfig, CclConfig, CclError, Collective, Communicator, Group, Job, ReduceOp,
};
use kernbench_runtime::machine::Machine;
use kernbench_spec::spec::System;
use kernbench_systems::Tick;
use kernbench_systems::memory::DataMode;

/// The smallest bucket: below it every algorithm is latency-bound and one
/// decision serves all sizes.
pub const MIN_BUCKET_BYTES: u64 = 1024;

/// The bucket of a collective of `bytes` per participant: the smallest
/// power of two at least `bytes` (and at least [`MIN_BUCKET_BYTES`]). Its
/// decision is tuned at that size.
pub fn bucket(bytes: u64) -> u64 {
    // Above 2^63 there is no power of two in u64: the largest one stands in.
    bytes
        .max(MIN_BUCKET_BYTES)
        .checked_next_power_of_two()
        .unwrap_or(1 << 63)
}

/// One candidate's simulated time for a bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub config: String,
    /// None when it cannot run here; `note` says why.
    pub ticks: Option<Tick>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// The pick for one (collective, bucket): the fastest candidate, ties to
/// the first in candidate order, and every candidate's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub collective: String,
    pub bucket_bytes: u64,
    /// The size simulated: the bucket, rounded down to whole blocks for
    /// all-to-all.
    pub tuned_bytes: u64,
    pub config: String,
    pub ticks: Tick,
    pub timings: Vec<Timing>,
}

/// The fastest of `timings` other than `chosen` (ties to the first).
pub fn runner_up<'a>(timings: &'a [Timing], chosen: &str) -> Option<(&'a str, Tick)> {
    timings
        .iter()
        .filter(|t| t.config != chosen)
        .filter_map(|t| t.ticks.map(|k| (t.config.as_str(), k)))
        .min_by_key(|&(_, k)| k)
}

/// The fastest of `timings` (ties to the first); None if none ran.
pub fn fastest(timings: &[Timing]) -> Option<(usize, Tick)> {
    let mut best: Option<(usize, Tick)> = None;
    for (i, t) in timings.iter().enumerate() {
        if let Some(k) = t.ticks
            && best.is_none_or(|(_, b)| k < b)
        {
            best = Some((i, k));
        }
    }
    best
}

/// What [`Tuner::with_progress`] calls: (candidate, bucket).
pub type OnSimulated = std::sync::Arc<dyn Fn(&str, u64) + Send + Sync>;

/// Chooses configurations per (collective, bucket) on one system.
pub struct Tuner {
    sys: System,
    candidates: Vec<AlgoConfig>,
    /// Digests of the spec and the candidates: the fixed part of every
    /// cache key.
    digests: (String, String),
    cache: Option<Cache>,
    retune: bool,
    /// Decisions made or read by this tuner: a process group asks once per
    /// collective call, and only the first call of a bucket tunes.
    known: HashMap<CacheKey, Decision>,
    /// Called with a candidate's name and the bucket as each simulation
    /// ends (a progress bar).
    on_simulated: Option<OnSimulated>,
    /// Candidate simulations run so far (cache hits run none).
    pub simulations: usize,
    /// Cache files found untrustworthy and rebuilt, with the reason.
    pub rebuilt: Vec<String>,
}

impl Tuner {
    /// A tuner over `ccl`'s candidates that every SIP's kind supports (all
    /// of them on a homogeneous system), without a cache. Every rank runs
    /// the pick; the heterogeneous protocol, where a rank may fall back, is
    /// [`hetero`].
    pub fn new(sys: &System, ccl: &CclConfig) -> Self {
        let count = sys.spec.system.sips.count;
        let candidates: Vec<AlgoConfig> = ccl
            .candidates
            .iter()
            .filter(|c| (0..count).all(|s| sys.kinds.of(s).supports(&c.name)))
            .cloned()
            .collect();
        let digest = serde_json::to_string(&candidates).expect("configurations always serialize");
        Self {
            sys: sys.clone(),
            candidates,
            digests: (cache::sha256(&sys.to_yaml()), cache::sha256(&digest)),
            cache: None,
            retune: false,
            known: HashMap::new(),
            on_simulated: None,
            simulations: 0,
            rebuilt: Vec::new(),
        }
    }

    /// Reads and writes decisions under `dir`; `retune` ignores what is
    /// there (and overwrites it).
    pub fn with_cache(mut self, dir: impl Into<std::path::PathBuf>, retune: bool) -> Self {
        self.cache = Some(Cache::new(dir));
        self.retune = retune;
        self
    }

    /// Calls `f(candidate, bucket)` as each simulation of a tune ends.
    pub fn with_progress(mut self, f: OnSimulated) -> Self {
        self.on_simulated = Some(f);
        self
    }

    pub fn candidates(&self) -> &[AlgoConfig] {
        &self.candidates
    }

    /// The candidate a decision picked.
    pub fn config(&self, d: &Decision) -> &AlgoConfig {
        self.candidates
            .iter()
            .find(|c| c.name == d.config)
            .expect("a decision names one of its tuner's candidates")
    }

    /// The cache key of a decision of this tuner.
    pub fn cache_key(&self, collective: Collective, group: &Group, bucket: u64) -> CacheKey {
        let (spec, candidates) = &self.digests;
        CacheKey::new(
            spec,
            candidates,
            collective.name(),
            &group_key(group),
            bucket,
        )
    }

    /// The decision for a collective of `bytes` per participant over the
    /// whole machine (every SIP's cube leaders): see [`Tuner::decide_in`].
    pub fn decide(&mut self, collective: Collective, bytes: u64) -> Result<Decision, CclError> {
        self.decide_in(&Group::new(&self.sys), collective, bytes)
    }

    /// The decision for a collective of `bytes` per participant over
    /// `group`: one this tuner already made, else from the cache when it
    /// holds a trustworthy one, else tuned (and stored).
    pub fn decide_in(
        &mut self,
        group: &Group,
        collective: Collective,
        bytes: u64,
    ) -> Result<Decision, CclError> {
        let b = bucket(bytes);
        let key = self.cache_key(collective, group, b);
        if let Some(d) = self.known.get(&key) {
            return Ok(d.clone());
        }
        let lookup = match &self.cache {
            Some(cache) if !self.retune => match cache.get(&key) {
                Lookup::Hit(d) => match self.check_cached(&d, collective, b) {
                    Ok(()) => Lookup::Hit(d),
                    Err(why) => Lookup::Rejected(format!("{}: {why}", cache.path(&key).display())),
                },
                other => other,
            },
            _ => Lookup::Missing,
        };
        let cached = match lookup {
            Lookup::Hit(d) => Some(d),
            Lookup::Missing => None,
            Lookup::Rejected(why) => {
                self.rebuilt.push(why);
                None
            }
        };
        let d = match cached {
            Some(d) => d,
            None => {
                let d = self.tune(group, collective, b)?;
                if let Some(cache) = &self.cache {
                    cache.put(&key, &d).map_err(CclError::Config)?;
                }
                d
            }
        };
        self.known.insert(key, d.clone());
        Ok(d)
    }

    /// Refuses a cached decision this tuner could not have made: for
    /// another collective or bucket, or picking a configuration that is not
    /// one of its candidates (a hand edit, or a ccl config changed in a way
    /// the key does not see). Err says why.
    fn check_cached(
        &self,
        d: &Decision,
        collective: Collective,
        bucket: u64,
    ) -> Result<(), String> {
        if d.collective != collective.name() || d.bucket_bytes != bucket {
            return Err(format!(
                "its decision is for {} at {} B, not {collective} at {bucket} B",
                d.collective, d.bucket_bytes
            ));
        }
        if !self.candidates.iter().any(|c| c.name == d.config) {
            let names: Vec<&str> = self.candidates.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "its decision names config '{}', which is not a candidate of the current ccl config ({})",
                d.config,
                names.join(", ")
            ));
        }
        Ok(())
    }

    /// Simulates every candidate at the bucket's size, in parallel.
    fn tune(
        &mut self,
        group: &Group,
        collective: Collective,
        bucket: u64,
    ) -> Result<Decision, CclError> {
        let n = group.size().max(1);
        let mut elems = (bucket / 2) as usize;
        if collective == Collective::AllToAll {
            elems = (elems / n).max(1) * n;
        }
        let job = Job {
            collective,
            op: ReduceOp::Sum,
            elems,
        };
        let (sys, done) = (&self.sys, &self.on_simulated);
        let timings: Vec<Timing> = self
            .candidates
            .par_iter()
            .map(|c| {
                let measured = measure_in(sys, c, group.clone(), job);
                if let Some(done) = done {
                    done(&c.name, bucket);
                }
                match measured {
                    Ok(ticks) => Timing {
                        config: c.name.clone(),
                        ticks: Some(ticks),
                        note: String::new(),
                    },
                    Err(e) => Timing {
                        config: c.name.clone(),
                        ticks: None,
                        note: e.to_string(),
                    },
                }
            })
            .collect();
        self.simulations += timings.iter().filter(|t| t.ticks.is_some()).count();
        let Some((i, ticks)) = fastest(&timings) else {
            return Err(CclError::Config(format!(
                "autotune {collective} at {bucket} B on {}: no candidate runs here; allowed: autotune.configs in the ccl config that support {collective} on {} ({})",
                sys.origin,
                group.topology.name(),
                timings
                    .iter()
                    .map(|t| format!("{}: {}", t.config, t.note))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        };
        Ok(Decision {
            collective: collective.name().into(),
            bucket_bytes: bucket,
            tuned_bytes: job.bytes(),
            config: timings[i].config.clone(),
            ticks,
            timings,
        })
    }
}

/// A process group's picks under `algorithm: auto` are the tuner's
/// decisions.
impl kernbench_dist::ConfigPicker for Tuner {
    fn pick(
        &mut self,
        group: &Group,
        collective: Collective,
        bytes: u64,
    ) -> Result<&AlgoConfig, CclError> {
        let decision = self.decide_in(group, collective, bytes)?;
        Ok(self.config(&decision))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// `dist::init_process_group` for any ccl entry: under `algorithm: auto` a
/// [`Tuner`] over `ccl`'s candidates picks each collective's configuration.
pub fn init_process_group(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    mode: DataMode,
) -> Result<kernbench_dist::ProcessGroup, kernbench_dist::DistError> {
    let budget = kernbench_ccl::estimate::Budget::of_this_machine();
    let new_tuner = || Box::new(Tuner::new(sys, ccl)) as Box<dyn kernbench_dist::ConfigPicker>;
    kernbench_dist::init_process_group_picking(sys, ccl, algorithm, mode, &budget, Some(&new_tuner))
}

/// [`init_process_group`] whose tuner, under `algorithm: auto`, reads and
/// stores its decisions in `cache` when given (as `sweep --autotune-cache`
/// does for its auto points).
pub fn init_process_group_cached(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    mode: DataMode,
    cache: Option<&std::path::Path>,
) -> Result<kernbench_dist::ProcessGroup, kernbench_dist::DistError> {
    let mut pg = init_process_group(sys, ccl, algorithm, mode)?;
    if let (Some(dir), Some(_)) = (cache, &pg.tuner) {
        pg.tuner = Some(Box::new(Tuner::new(sys, ccl).with_cache(dir, false)));
    }
    Ok(pg)
}

/// How a cache key names a group: its SIPs in order, their arrangement and
/// participants per cube (the whole machine's group of one topology is the
/// same string on every spec of that shape; the spec's own digest tells
/// specs apart).
pub fn group_key(g: &Group) -> String {
    let n = g.sip_count();
    let sips = if g.sips.iter().copied().eq(0..n) {
        format!("SIPs 0..{n}")
    } else {
        format!("SIPs {:?}", g.sips)
    };
    format!(
        "{sips} as {} {}x{}, {} PE(s) per cube",
        g.topology.name(),
        g.grid.0,
        g.grid.1,
        g.pes
    )
}

/// One candidate's time for `job` over the whole machine, on a fresh
/// machine of `sys` (timing only).
pub fn measure(sys: &System, config: &AlgoConfig, job: Job) -> Result<Tick, CclError> {
    measure_in(sys, config, Group::new(sys), job)
}

/// One candidate's time for `job` over `group`, on a fresh machine of
/// `sys` (timing only).
pub fn measure_in(
    sys: &System,
    config: &AlgoConfig,
    group: Group,
    job: Job,
) -> Result<Tick, CclError> {
    Communicator::check_before_build(sys, config, &job)?;
    let mut m = Machine::build_with(sys, DataMode::TimingOnly)
        .map_err(|e| CclError::Config(e.to_string()))?;
    let comm = Communicator::with_group(&mut m, config, group, &config.name)?;
    Ok(comm.run(&mut m, job)?.ticks)
}
