//! Heterogeneous autotuning (SIPs of different kinds), played by the ranks of a
//! process group on the simulated machine:
//!
//! 1. each rank declares the candidates its SIP kind supports
//!    (`sip_kinds.K.capabilities`);
//! 2. the ranks exchange that metadata with a real all-gather (its length
//!    first, with an all-reduce MAX);
//! 3. each builds the unified list: every config any rank has, deduplicated,
//!    in rank-then-declaration order;
//! 4. for each config, after a barrier, all ranks run it: a rank that has it
//!    times its call, a rank that lacks it runs its fallback and contributes
//!    0, and an all-reduce MAX gives every rank the config's time (the
//!    slowest rank that has it);
//! 5. all ranks pick the same fastest config;
//! 6. the real collective runs it; a rank lacking it runs its fallback: its
//!    fastest available config of the same algorithm and chunks.
//!
//! What "runs a fallback" means here: one collective needs one algorithm on
//! every participant, so the kernels (and the pieces they send) are the
//! picked config's, while a rank lacking it keeps its own queue settings
//! (buffer kind, slots, slot size), which are receiver-side in the IPCQ. A
//! config whose algorithm some rank has in no form cannot run as a group: it
//! is skipped on every rank alike, and never picked.
//!
//! Metadata and timings travel over the process group's default
//! communicator (the ccl `defaults` entry), as NCCL bootstraps over its own
//! channel. f16 holds integers up to 2048 exactly, so numbers travel as
//! base-2048 digits: the MAX of a number is one all-reduce MAX per digit,
//! most significant first, each rank contributing a digit only while its
//! higher digits equal the maximum so far.

use std::sync::Mutex;

use super::Timing;
use kernbench_ccl::{AlgoConfig, CclConfig, Collective, Communicator, ReduceOp, algorithms};
use kernbench_dist::{DPPolicy, DistError, GroupId, Rank, WORLD};
use kernbench_spec::spec::System;
use kernbench_systems::Tick;
use kernbench_systems::memory::DataMode;

/// Integers f16 holds exactly: digits are base 2048.
const DIGIT: u64 = 2048;
/// Digits of a number: 2048³ ticks is 8.6 s of simulated time.
const DIGITS: u32 = 3;

/// What the protocol found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolOutcome {
    /// The unified configs, in order.
    pub unified: Vec<String>,
    /// `available[rank][config]`.
    pub available: Vec<Vec<bool>>,
    /// `measured[config][rank]`: the rank's own time for the config (None
    /// when it lacks the config or the config cannot run as a group).
    pub measured: Vec<Vec<Option<Tick>>>,
    /// Per config, what the all-reduce MAX gave every rank (None: skipped).
    pub timings: Vec<Option<Tick>>,
    /// The picked config.
    pub best: usize,
    /// Per rank, the config it ran in the real collective.
    pub ran: Vec<String>,
    /// The real collective's time and whether every rank's result matched
    /// the reference (all-reduce sum; None for other collectives).
    pub ticks: Tick,
    pub correct: Option<bool>,
}

impl ProtocolOutcome {
    /// The agreed timings as the tuner's table.
    pub fn table(&self) -> Vec<Timing> {
        table(&self.unified, &self.timings)
    }
}

fn table(names: &[String], timings: &[Option<Tick>]) -> Vec<Timing> {
    names
        .iter()
        .zip(timings)
        .map(|(name, &ticks)| Timing {
            config: name.clone(),
            ticks,
            note: String::new(),
        })
        .collect()
}

/// The capability list of every rank: the candidates its kind supports.
/// A capability naming no candidate is an error naming the kind.
pub fn capabilities(sys: &System, ccl: &CclConfig) -> Result<Vec<Vec<usize>>, DistError> {
    for kind in &sys.kinds.kinds {
        for name in kind.capabilities.iter().flatten() {
            if !ccl.candidates.iter().any(|c| &c.name == name) {
                return Err(DistError::Config(format!(
                    "sip_kinds.{}.capabilities: '{name}' is not an autotune candidate of {}; allowed: {}",
                    kind.name,
                    ccl.origin,
                    ccl.candidates
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    Ok((0..sys.n_sips())
        .map(|sip| {
            let kind = sys.kinds.of(sip);
            (0..ccl.candidates.len())
                .filter(|&i| kind.supports(&ccl.candidates[i].name))
                .collect()
        })
        .collect())
}

/// A config's metadata as the ranks exchange it: name and parameters.
fn describe(c: &AlgoConfig) -> String {
    format!(
        "{}|{}|{}|{}|{}|{}",
        c.name,
        c.algorithm,
        c.buffer_kind.name(),
        c.n_slots,
        c.slot_size,
        c.chunks
    )
}

/// Step 3: every config any rank declared, first by rank then by the
/// rank's order, once; and which rank has which.
pub fn merge(lists: &[Vec<String>]) -> (Vec<String>, Vec<Vec<bool>>) {
    let mut unified: Vec<String> = Vec::new();
    for list in lists {
        for d in list {
            if !unified.contains(d) {
                unified.push(d.clone());
            }
        }
    }
    let available = lists
        .iter()
        .map(|l| unified.iter().map(|d| l.contains(d)).collect())
        .collect();
    (unified, available)
}

/// The config a rank runs for unified config `i`: `i` itself, else its
/// available config of the same algorithm and chunks that `rank_by` ranks
/// first; None if it has none.
fn fallback(
    configs: &[AlgoConfig],
    has: &[bool],
    i: usize,
    rank_by: impl Fn(usize) -> (Option<Tick>, usize),
) -> Option<usize> {
    if has[i] {
        return Some(i);
    }
    let same = |j: usize| {
        has[j]
            && algorithms::canonical(&configs[j].algorithm)
                == algorithms::canonical(&configs[i].algorithm)
            && configs[j].chunks == configs[i].chunks
    };
    (0..configs.len()).filter(|&j| same(j)).min_by_key(|&j| {
        let (t, order) = rank_by(j);
        (t.is_none(), t, order)
    })
}

/// Runs the protocol for `collective` of `bytes` per participant on a fresh
/// process group of `sys` (functional mode, so the final result is checked).
pub fn autotune(
    sys: &System,
    ccl: &CclConfig,
    collective: Collective,
    bytes: u64,
) -> Result<ProtocolOutcome, DistError> {
    let caps = capabilities(sys, ccl)?;
    let mut pg = super::init_process_group(sys, ccl, "defaults", DataMode::Functional)?;
    let n = pg.world_size;
    if n != sys.n_sips() {
        return Err(DistError::Config(format!(
            "heterogeneous autotuning runs one rank per SIP; the ccl defaults give a world of {n} ranks on {} SIPs; allowed: no world_size in the ccl defaults",
            sys.n_sips()
        )));
    }
    let (configs, available) = declare(&mut pg, &caps, ccl)?;
    let (measured, timings) = time_all(&mut pg, &configs, &available, collective, bytes)?;
    // Step 5: the same pick everywhere; step 6: smart fallbacks.
    let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
    let (best, _) = crate::autotune::fastest(&table(&names, &timings)).ok_or_else(|| {
        DistError::Config(
            "no config runs on every rank (each needs its algorithm, with the same chunks, in some config of every rank's kind); allowed: capabilities that share at least one algorithm".into(),
        )
    })?;
    let runs: Vec<usize> = available
        .iter()
        .map(|has| {
            fallback(&configs, has, best, |j| (timings[j], j))
                .expect("the picked config ran, so every rank has a fallback")
        })
        .collect();
    let final_group = install(&mut pg, "tuned", &configs[best], &configs, &runs)?;
    let (ticks, correct) = run_final(&mut pg, final_group, collective, bytes)?;
    Ok(ProtocolOutcome {
        unified: names,
        available,
        measured,
        timings,
        best,
        ran: runs.iter().map(|&j| configs[j].name.clone()).collect(),
        ticks,
        correct,
    })
}

/// Steps 1-3, on the machine: each rank declares its configs, they
/// all-gather the lists and agree on the unified configs and on which rank
/// has which.
fn declare(
    pg: &mut kernbench_dist::ProcessGroup,
    caps: &[Vec<usize>],
    ccl: &CclConfig,
) -> Result<(Vec<AlgoConfig>, Vec<Vec<bool>>), DistError> {
    let n = pg.world_size;
    type Merged = (Vec<String>, Vec<Vec<bool>>);
    let merged: Mutex<Vec<Merged>> = Mutex::new(vec![Default::default(); n as usize]);
    pg.spawn(n, |rank| {
        let mine: Vec<String> = caps[rank.rank() as usize]
            .iter()
            .map(|&i| describe(&ccl.candidates[i]))
            .collect();
        let all = exchange(rank, &mine.join(";"))?;
        let parsed: Vec<Vec<String>> = all
            .iter()
            .map(|t| {
                t.split(';')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .collect();
        merged.lock().expect("no worker panics holding it")[rank.rank() as usize] = merge(&parsed);
        Ok(())
    })?;
    // Every rank's view of who has what came from the all-gather; they agree.
    let merged = merged.into_inner().expect("workers are done");
    if merged.iter().any(|m| *m != merged[0]) {
        return Err(DistError::Collective(
            "ranks built different unified config lists from the all-gather".into(),
        ));
    }
    let (unified, available) = merged.into_iter().next().expect("a world has a rank");
    let configs: Vec<AlgoConfig> = unified
        .iter()
        .map(|d| {
            ccl.candidates
                .iter()
                .find(|c| describe(c) == *d)
                .expect("every unified config is a candidate")
                .clone()
        })
        .collect();
    Ok((configs, available))
}

/// Per unified config: each rank's own time, and the MAX they agreed on.
type Timed = (Vec<Vec<Option<Tick>>>, Vec<Option<Tick>>);

/// Step 4: every config timed by all ranks; per config, each rank's own
/// time (`measured`) and the MAX they agreed on (None: skipped).
fn time_all(
    pg: &mut kernbench_dist::ProcessGroup,
    configs: &[AlgoConfig],
    available: &[Vec<bool>],
    collective: Collective,
    bytes: u64,
) -> Result<Timed, DistError> {
    let n = pg.world_size;
    // Step 4: one config at a time, on a group of its own (ranks lacking
    // it on their first same-algorithm fallback), released once timed so
    // that the configs' slot areas never pile up.
    let mut measured = vec![vec![None; n as usize]; configs.len()];
    let mut agreed: Vec<Vec<Option<Tick>>> = vec![Vec::new(); n as usize];
    for (i, c) in configs.iter().enumerate() {
        let picks: Option<Vec<usize>> = available
            .iter()
            .map(|has| fallback(configs, has, i, |j| (None, j)))
            .collect();
        // A config that cannot run here (another collective, another
        // topology, slot areas that do not fit) is skipped on every rank.
        let runnable = Communicator::supports(c, collective).is_ok();
        let group = match picks.filter(|_| runnable) {
            Some(picks) => install(pg, &format!("tune:{}", c.name), c, configs, &picks).ok(),
            None => None,
        };
        let Some(g) = group else {
            agreed.iter_mut().for_each(|a| a.push(None));
            continue;
        };
        let times = time_config(pg, g, collective, bytes, available, i)?;
        pg.release(g)?;
        for (r, (mine, max)) in times.into_iter().enumerate() {
            measured[i][r] = mine;
            agreed[r].push(Some(max));
        }
    }
    let timings = agreed[0].clone();
    if agreed.iter().any(|t| *t != timings) {
        return Err(DistError::Collective(
            "ranks received different timings from the all-reduce".into(),
        ));
    }
    Ok((measured, timings))
}

/// Config `i` timed on group `g`: per rank, its own time when it has the
/// config, and the all-reduce MAX every rank receives.
fn time_config(
    pg: &mut kernbench_dist::ProcessGroup,
    g: GroupId,
    collective: Collective,
    bytes: u64,
    available: &[Vec<bool>],
    i: usize,
) -> Result<Vec<(Option<Tick>, Tick)>, DistError> {
    let n = pg.world_size;
    let times: Mutex<Vec<(Option<Tick>, Tick)>> = Mutex::new(vec![(None, 0); n as usize]);
    pg.spawn(n, |rank| {
        let r = rank.rank() as usize;
        let cubes = rank.sip_shape().0;
        let elems = cubes as usize * (bytes / 2) as usize;
        let t = rank.empty(
            (cubes as usize, (bytes / 2) as usize),
            DPPolicy::cube_replicas(cubes),
        )?;
        rank.write(&t, &vec![1.0; elems])?;
        rank.barrier(WORLD)?;
        let start = rank.now();
        rank.collective(g, collective, &t, ReduceOp::Sum)?;
        let mine = rank.now() - start;
        let has = available[r][i];
        let max = all_reduce_max(rank, if has { mine } else { 0 })?;
        rank.free(t)?;
        times.lock().expect("no worker panics holding it")[r] = (has.then_some(mine), max);
        Ok(())
    })?;
    Ok(times.into_inner().expect("workers are done"))
}

/// A world group running `configs[pick]`'s kernels with each rank's queues
/// from `configs[picks[rank]]`.
fn install(
    pg: &mut kernbench_dist::ProcessGroup,
    name: &str,
    config: &AlgoConfig,
    configs: &[AlgoConfig],
    picks: &[usize],
) -> Result<GroupId, DistError> {
    let queues = |sip: u32| configs[picks[sip as usize]].queues();
    pg.world_group_with(name, config, &queues)
}

/// The tuned collective on real data: all-reduce sums are checked on every
/// rank against the exact reference.
fn run_final(
    pg: &mut kernbench_dist::ProcessGroup,
    g: GroupId,
    collective: Collective,
    bytes: u64,
) -> Result<(Tick, Option<bool>), DistError> {
    let n = pg.world_size;
    let results: Mutex<Vec<(Tick, bool)>> = Mutex::new(vec![(0, false); n as usize]);
    pg.spawn(n, |rank| {
        let r = rank.rank();
        let cubes = rank.sip_shape().0;
        let cols = (bytes / 2) as usize;
        let t = rank.empty((cubes as usize, cols), DPPolicy::cube_replicas(cubes))?;
        let value = |sip: u32, i: usize| ((7 * sip as usize + 3 * i) % 5) as f32;
        let data: Vec<f32> = (0..cubes as usize * cols).map(|i| value(r, i)).collect();
        rank.write(&t, &data)?;
        let res = rank.collective(g, collective, &t, ReduceOp::Sum)?;
        let got = rank.read(&t)?;
        // Each cube's row is one participant's buffer: every row becomes
        // the sum of all participants' rows.
        let c = cubes as usize;
        let sum = |j: usize| -> f32 {
            (0..n)
                .flat_map(|s| (0..c).map(move |k| value(s, k * cols + j)))
                .sum()
        };
        let want: Vec<f32> = (0..c * cols).map(|i| sum(i % cols)).collect();
        let ok = got == want;
        results.lock().expect("no worker panics holding it")[r as usize] = (res.ticks, ok);
        Ok(())
    })?;
    let results = results.into_inner().expect("workers are done");
    let ticks = results[0].0;
    let correct = (collective == Collective::AllReduce).then(|| results.iter().all(|&(_, ok)| ok));
    Ok((ticks, correct))
}

/// Step 2: every rank's text, through an all-reduce MAX of the length and
/// an all-gather of the padded bytes (one f16 per byte).
fn exchange(rank: &mut Rank, text: &str) -> Result<Vec<String>, DistError> {
    let n = rank.world_size() as usize;
    let (cubes, _) = rank.sip_shape();
    let len = all_reduce_max(rank, text.len() as u64)? as usize;
    let block = len.max(1);
    let participants = n * cubes as usize;
    let t = rank.empty(
        (cubes as usize, participants * block),
        DPPolicy::cube_replicas(cubes),
    )?;
    let mut data = vec![0f32; cubes as usize * participants * block];
    for cube in 0..cubes as usize {
        let p = rank.rank() as usize * cubes as usize + cube;
        let row = cube * participants * block;
        for (k, b) in text.bytes().enumerate() {
            data[row + p * block + k] = f32::from(b);
        }
    }
    rank.write(&t, &data)?;
    rank.all_gather(&t)?;
    let got = rank.read(&t)?;
    rank.free(t)?;
    // Cube 0's row; rank s's text is the block of its first cube.
    Ok((0..n)
        .map(|s| {
            let at = s * cubes as usize * block;
            got[at..at + block]
                .iter()
                .take_while(|&&v| v != 0.0)
                .map(|&v| v as u8 as char)
                .collect()
        })
        .collect())
}

/// The largest `value` of any rank, through one all-reduce MAX per base-2048
/// digit.
fn all_reduce_max(rank: &mut Rank, value: u64) -> Result<u64, DistError> {
    assert!(
        value < DIGIT.pow(DIGITS),
        "{value} needs more than {DIGITS} digits"
    );
    let (cubes, _) = rank.sip_shape();
    let t = rank.empty((cubes as usize, 1), DPPolicy::cube_replicas(cubes))?;
    let (mut max, mut tied) = (0u64, true);
    for d in (0..DIGITS).rev() {
        let unit = DIGIT.pow(d);
        let mine = if tied { value / unit % DIGIT } else { 0 };
        rank.write(&t, &vec![mine as f32; cubes as usize])?;
        rank.all_reduce(&t, ReduceOp::Max)?;
        let top = rank.read(&t)?[0] as u64;
        tied = tied && mine == top;
        max += top * unit;
    }
    rank.free(t)?;
    Ok(max)
}
