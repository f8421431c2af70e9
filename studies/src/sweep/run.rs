//! The one runner of every [`Study`]: points in parallel (rayon, one world
//! per point), each point's file written atomically as it completes;
//! resume, shards, the fingerprint and lock, the progress bar, the budget
//! and Ctrl-C.

use super::fingerprint::{self, Fingerprint};
use super::lock::Lock;
use super::study::{PointEnv, PointFile, Study, StudyPoint, StudyRow, consolidate};
use kernbench_runtime::output::{foreign_entries, some_of, write_file};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use kernbench_ccl::estimate::Budget;

pub use super::collective::{OUTPUT_FILES, run_point};

/// How to run a study.
#[derive(Debug, Clone)]
pub struct Options {
    pub out: PathBuf,
    pub jobs: usize,
    /// Skip points whose result file exists.
    pub resume: bool,
    /// Run only points with `index % n == k - 1`; with `resume`, None means
    /// the result set's own shard (see [`resolve_shard`]).
    pub shard: Option<(usize, usize)>,
    /// Set by Ctrl-C: no new point starts.
    pub stop: Arc<AtomicBool>,
    /// The ccl config text, saved beside the results.
    pub ccl_text: String,
    /// Where the ccl config came from (a path, or the embedded default).
    pub ccl_origin: String,
    /// Reset and read (MB) of a heap-peak counter, if the binary installed
    /// one; otherwise the process's resident high-water mark is reported.
    pub heap_peak: Option<HeapPeak>,
    /// Where points whose algorithm is `auto` read and store the tuner's
    /// decisions (None: each such point tunes its bucket itself).
    pub autotune_cache: Option<PathBuf>,
    /// `out` was claimed by its command (`output::claim_dir`), which
    /// checked that it holds only that command's own files and cleared its
    /// points: the result-set checks of `out` ([`check_out`]) are skipped.
    pub claimed: bool,
    /// Budget of the whole sweep: each of the `jobs` points running at once
    /// may use its share of the memory and all of the time; a point
    /// estimated above it fails at once.
    pub budget: Budget,
}

impl Options {
    /// A sweep into `out` on `jobs` threads with the embedded ccl config, no
    /// resume or shard, and this machine's budget.
    pub fn new(out: PathBuf, jobs: usize) -> Options {
        Options {
            out,
            jobs,
            resume: false,
            shard: None,
            stop: Arc::new(AtomicBool::new(false)),
            ccl_text: kernbench_ccl::config::DEFAULT_CCL_YAML.into(),
            ccl_origin: "<embedded ccl.yaml>".into(),
            heap_peak: None,
            autotune_cache: None,
            claimed: false,
            budget: Budget::of_this_machine(),
        }
    }
}

/// Reset and read (MB) functions of a peak-heap counter.
#[derive(Debug, Clone, Copy)]
pub struct HeapPeak {
    pub reset: fn(),
    pub read_mb: fn() -> f64,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Outcome<R = super::results::Row> {
    pub rows: Vec<R>,
    pub ran: usize,
    pub skipped: usize,
    pub planned: usize,
    pub interrupted: bool,
}

/// Runs one point under `heap`'s counter and the clock; a panic becomes
/// the row `failed` makes of its message, and the sweep goes on.
pub(crate) fn measured<R>(
    heap: Option<HeapPeak>,
    axes: Vec<(String, String)>,
    run: impl FnOnce() -> R,
    failed: impl FnOnce(String) -> R,
) -> PointFile<R> {
    if let Some(h) = heap {
        (h.reset)();
    }
    let t0 = Instant::now();
    // A panic is a bug, not an outcome: it becomes this point's error.
    let row = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
        .unwrap_or_else(|payload| failed(format!("panicked: {}", panic_message(&*payload))));
    let peak_mb = match heap {
        Some(h) => (h.read_mb)(),
        None => kernbench_runtime::report::peak_rss_bytes().unwrap_or(0) as f64 / (1 << 20) as f64,
    };
    PointFile {
        row,
        axes,
        wall_ms: t0.elapsed().as_secs_f64() * 1000.0,
        peak_mb,
    }
}

/// The message of a panic payload (a `&str` or `String`, as `panic!` makes).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

fn point_path(dir: &Path, p: &impl StudyPoint) -> PathBuf {
    dir.join("points")
        .join(format!("{:06}-{}.json", p.index(), p.id()))
}

/// The shard a run works on: the asked one; on `--resume`, the result
/// set's own (no `--shard`), and a different one is refused, so one set
/// never mixes two shards.
pub fn resolve_shard(
    dir: &Path,
    resume: bool,
    asked: Option<(usize, usize)>,
) -> Result<Option<(usize, usize)>, String> {
    let theirs = match resume {
        true => Fingerprint::read(dir)?,
        false => None,
    };
    match theirs {
        None => Ok(asked),
        Some(t) if asked.is_none() || asked == t.shard => Ok(t.shard),
        Some(t) => Err(format!(
            "--shard {}: cannot resume {} with it: the result set holds {}; allowed: {}; use a new --out for another shard",
            fingerprint::show_shard(asked).trim_start_matches("shard "),
            dir.display(),
            fingerprint::show_shard(t.shard),
            match t.shard {
                Some((k, n)) => format!("no --shard (the set's own) or --shard {k}/{n}"),
                None => "no --shard".into(),
            }
        )),
    }
}

/// Refuses an `--out` a sweep must not write into: missing on `--resume`,
/// holding files that are not a result set, or (without `--resume`) one
/// that already has points. Run before any work, and again under the lock.
pub fn check_out(dir: &Path, resume: bool) -> Result<(), String> {
    if resume && !dir.is_dir() {
        return Err(format!(
            "--resume --out {}: no such directory, so there is no sweep to resume; drop --resume to start a new sweep there",
            dir.display()
        ));
    }
    let held = foreign_entries(dir, &[".lock"])?;
    let has_points = foreign_entries(&dir.join("points"), &[])?
        .iter()
        .any(|n| n.ends_with(".json"));
    if !dir.join(fingerprint::FILE).exists() && !held.is_empty() {
        return Err(format!(
            "--out {}: the directory holds files that are not a kernbench result set (no {}): {}; the sweep would overwrite them; allowed: an empty or new --out",
            dir.display(),
            fingerprint::FILE,
            some_of(&held)
        ));
    }
    if has_points && !resume {
        return Err(format!(
            "--out {} already holds results: pass --resume to continue it, or choose another --out",
            dir.display()
        ));
    }
    Ok(())
}

/// Prepares `opts.out` for this run: takes the lock, refuses a directory it
/// must not write into, writes the fingerprint and the inputs; returns the
/// lock and the shard the run works on.
fn prepare<S: Study>(study: &S, opts: &Options) -> Result<(Lock, Option<(usize, usize)>), String> {
    let dir = &opts.out;
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    let check = || match opts.claimed {
        true => Ok(()),
        false => check_out(dir, opts.resume),
    };
    check()?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let lock = Lock::take(dir)?;
    check()?;
    if opts.resume && !dir.join(fingerprint::FILE).exists() {
        eprintln!(
            "note: {} holds no result set yet (a sweep stopped before it began one); starting it",
            dir.display()
        );
    }
    let shard = resolve_shard(dir, opts.resume, opts.shard)?;
    let inputs = study.inputs(&opts.ccl_text, &opts.ccl_origin);
    let mine = Fingerprint::new(
        &inputs.plan_text,
        &inputs.plan_origin,
        &inputs.system_yaml,
        &inputs.ccl_text,
        &inputs.ccl_origin,
        shard,
    );
    if let Some(theirs) = Fingerprint::read(dir)?
        && let Some(diff) = mine.difference(&theirs, false)
        && opts.resume
    {
        return Err(format!(
            "cannot resume {}: {diff}; resume with the same plan, system and ccl config, or use a new --out",
            dir.display()
        ));
    }
    let json = serde_json::to_vec_pretty(&mine).expect("fingerprints serialize");
    write_file(&dir.join(fingerprint::FILE), &json)?;
    let points_dir = dir.join("points");
    std::fs::create_dir_all(&points_dir).map_err(|e| io(&points_dir, e))?;
    for (name, text) in &inputs.files {
        write_file(&dir.join(name), text.as_bytes())?;
    }
    Ok((lock, shard))
}

/// Moves point files that are not of this run's points — an index past the
/// plan, another shard's point, an id or contents that differ from the
/// plan's point at that index (e.g. copied in by hand) — to
/// `points/ignored/`, naming each on stderr, so no row comes from them.
/// Returns how many it moved.
fn set_aside_strays<S: Study>(dir: &Path, mine: &[S::Point]) -> Result<usize, String> {
    let points = dir.join("points");
    let mut moved = 0;
    for name in foreign_entries(&points, &[])? {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let path = points.join(&name);
        let point = stem
            .split_once('-')
            .and_then(|(i, id)| Some((i.parse::<usize>().ok()?, id)))
            .and_then(|(i, id)| mine.iter().find(|p| p.index() == i && p.id() == id));
        let why = match point {
            None => {
                "its index and id are of no point of this run (past the plan, another shard's, or another plan's)"
            }
            Some(p) => match std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<PointFile<S::Row>>(&t).ok())
            {
                Some(f) if f.row.index() != p.index() || f.row.id() != p.id() => {
                    "its contents are of another point than its name says"
                }
                _ => continue, // this run's point, or unreadable: `finished` handles it
            },
        };
        let ignored = points.join("ignored");
        let to = ignored.join(&name);
        std::fs::create_dir_all(&ignored)
            .and_then(|_| std::fs::rename(&path, &to))
            .map_err(|e| format!("{}: cannot move it aside: {e}", path.display()))?;
        eprintln!(
            "note: ignoring the point file {}: {why}; moved to {}",
            path.display(),
            to.display()
        );
        moved += 1;
    }
    Ok(moved)
}

/// Whether a finished, readable point file exists; an unreadable one is
/// moved to `points/corrupt/` with a note, so the point runs again.
fn finished<S: Study>(dir: &Path, p: &S::Point) -> bool {
    let path = point_path(dir, p);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return false;
    };
    match serde_json::from_str::<PointFile<S::Row>>(&text) {
        Ok(_) => true,
        Err(e) => {
            let corrupt = dir.join("points").join("corrupt");
            let to = corrupt.join(path.file_name().expect("a point file has a name"));
            let moved = std::fs::create_dir_all(&corrupt).and_then(|_| std::fs::rename(&path, &to));
            eprintln!(
                "note: {} is unreadable ({e}); {}; the point runs again",
                path.display(),
                match moved {
                    Ok(()) => format!("moved to {}", to.display()),
                    Err(m) => format!("could not move it aside ({m})"),
                }
            );
            false
        }
    }
}

/// Runs a study into `opts.out`: its points (or its shard's) in parallel,
/// each point's file written as it finishes, then the tables and figures
/// from every finished point; returns their rows.
pub fn run<S: Study>(study: &S, opts: &Options) -> Result<Outcome<S::Row>, String> {
    let dir = &opts.out;
    let shard = resolve_shard(dir, opts.resume, opts.shard)?;
    let (mut planned, mut weights, mut todo) = weighed_points(study, opts, shard);
    within_time_budget(&weights, &todo, opts)?;
    let (_lock, shard) = prepare(study, opts)?;
    if set_aside_strays::<S>(dir, &shard_points(study, shard))? > 0 {
        // A file set aside may have stood for one of this run's points.
        (planned, weights, todo) = weighed_points(study, opts, shard);
        within_time_budget(&weights, &todo, opts)?;
    }
    let skipped = planned - todo.len();
    let ran = run_points(study, opts, &weights, &todo)?;
    let interrupted = opts.stop.load(Ordering::SeqCst) && ran < todo.len();
    let rows = consolidate(study, dir)?;
    Ok(Outcome {
        rows,
        ran,
        skipped,
        planned,
        interrupted,
    })
}

/// Runs `todo` on `opts.jobs` workers, each taking the next point until
/// none is left or `opts.stop` is set; writes each point's file. Returns
/// how many ran.
fn run_points<S: Study>(
    study: &S,
    opts: &Options,
    weights: &[f64],
    todo: &[S::Point],
) -> Result<usize, String> {
    let bar = kernbench_runtime::progress::Progress::new("sweep", "points", weights);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let error = std::sync::Mutex::new(None::<String>);
    let jobs = opts.jobs.max(1);
    let budget = Budget {
        bytes: opts.budget.bytes / jobs as u64,
        ..opts.budget
    };
    let env = PointEnv {
        budget: &budget,
        autotune_cache: opts.autotune_cache.as_deref(),
    };
    let worker = || {
        while !opts.stop.load(Ordering::SeqCst) {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(p) = todo.get(i) else { return };
            let result = measured(
                opts.heap_peak,
                study.axes(p),
                || study.run_point(p, &env),
                |e| study.failed(p, e),
            );
            let json = serde_json::to_vec_pretty(&result).expect("rows serialize");
            if let Err(e) = write_file(&point_path(&opts.out, p), &json) {
                error.lock().expect("no poisoned lock").get_or_insert(e);
                opts.stop.store(true, Ordering::SeqCst);
            }
            done.fetch_add(1, Ordering::SeqCst);
            bar.tick(weights[i], &study.progress_note(&result.row));
        }
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| e.to_string())?;
    pool.scope(|s| {
        for _ in 0..jobs {
            s.spawn(|_| worker());
        }
    });
    bar.finish();
    if let Some(e) = error.into_inner().expect("no poisoned lock") {
        return Err(e);
    }
    Ok(done.into_inner())
}

/// The points of this shard, and those still to run (all but the finished
/// ones on --resume), longest first with their weights: taken in that order
/// by whichever worker is free, so no big one is left running alone at the end.
fn weighed_points<S: Study>(
    study: &S,
    opts: &Options,
    shard: Option<(usize, usize)>,
) -> (usize, Vec<f64>, Vec<S::Point>) {
    let mine = shard_points(study, shard);
    let planned = mine.len();
    let mut weighed: Vec<(f64, S::Point)> = mine
        .into_iter()
        .filter(|p| !(opts.resume && finished::<S>(&opts.out, p)))
        .map(|p| (study.estimate_seconds(&p), p))
        .collect();
    weighed.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (weights, todo) = weighed.into_iter().unzip();
    (planned, weights, todo)
}

/// The study's points that shard K/N runs (all of them without a shard).
fn shard_points<S: Study>(study: &S, shard: Option<(usize, usize)>) -> Vec<S::Point> {
    study
        .points()
        .into_iter()
        .filter(|p| shard.is_none_or(|(k, n)| p.index() % n == k - 1))
        .collect()
}

/// Refuses a sweep whose points together are estimated above the time
/// budget, before anything is written ([`run`] checks it too).
pub fn check_budget<S: Study>(study: &S, opts: &Options) -> Result<(), String> {
    let shard = resolve_shard(&opts.out, opts.resume, opts.shard)?;
    let (_, weights, todo) = weighed_points(study, opts, shard);
    within_time_budget(&weights, &todo, opts)
}

/// The points to run together, on `opts.jobs` workers, within the time
/// budget (a point over it alone fails at once and costs nothing): refused
/// before anything is written, with the total and the longest point.
fn within_time_budget(
    weights: &[f64],
    todo: &[impl StudyPoint],
    opts: &Options,
) -> Result<(), String> {
    let jobs = opts.jobs.max(1) as f64;
    let limit = opts.budget.seconds;
    let runs = || weights.iter().zip(todo).filter(|(w, _)| **w <= limit);
    let wall = runs().map(|(w, _)| w).sum::<f64>() / jobs;
    if wall <= limit {
        return Ok(());
    }
    let (longest, point) = runs()
        .max_by(|a, b| a.0.total_cmp(b.0))
        .expect("a positive total has a point");
    Err(format!(
        "sweep: its {} points are estimated to need {wall:.0} s to simulate on {jobs} job(s) (the longest: {}, {longest:.0} s), more than the time budget of {limit:.0} s; allowed: fewer points (a smaller plan, --shard K/N), more --jobs, or --max-time if the wait is worth it (the time estimate is good to a factor of about 4)",
        runs().count(),
        point.label(),
    ))
}
