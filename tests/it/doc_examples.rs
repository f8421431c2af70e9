//! Every shell example in README.md and docs/*.md runs as written
//! (issue 12). The harness extracts the commands of ```sh and ```bash
//! blocks (lines; `\` joins), the `$ ` lines of plain blocks (output lines
//! starting with `error:` make it an example that must fail with that
//! message), and inline `cargo run …` spans, and runs each in a scratch
//! directory holding links to `configs/` and `tests/`, in block order.
//!
//! To keep CI fast, examples that succeed run on small inputs by this
//! mapping (examples that must fail run unchanged):
//!
//! | in the docs | runs as |
//! |---|---|
//! | `cargo run --release -- ARGS`, `kernbench ARGS` | the test build of the binary |
//! | `cargo run --release --example NAME ARGS` | the example binary `cargo test` builds |
//! | a size above 16K (`--min-bytes`, `-b`, `--max-bytes`, `-e`, `--collective-bytes`) | 16K |
//! | `--system`/`--preset` of more than 16 participants (topo, run) | checked to load, then the same system on 4 SIPs (2x2 for 2D topologies) if that has at most 16 participants (the README's 1024-SIP lean ring runs as a 4-SIP lean ring), else `tests/data/doc/small.yaml` (8) |
//! | `sweep --plan P` (or no `--plan`) | P checked to load, then `tests/data/doc/tiny.yaml` (`tiny_tp.yaml` for a TP plan, `tiny_train.yaml` for a train plan); without `--out`, `--out results/doc-K` (K-th sweep of the file) |
//! | `merge DIR…` of directories that do not exist | each made first by `sweep` of the tiny plan, shard k of N |
//! | `bench` | `--no-build`, `--sips 16`, `--rounds 4` |
//! | `tp-mlp --tp LIST` | `--tp 1,2` |
//! | `validate` (any `--matrix`) | `--matrix quick` |
//! | `train-step` | `--hidden 64 --heads 4 --seq 64`; `--micro-batches` at most `--pp` (1 without) |
//! | `autotune` | `--sizes` capped at 16K, on `tests/data/doc/small.yaml` (or the mapped `--system`/`--preset`) |
//! | `parallel -S HOSTS … 'CMD {}' ::: V…` | CMD for each V, here (`cd DIR &&` dropped) |
//! | `$SLURM_ARRAY_TASK_ID` | 1 |
//! | `neato …` | run if Graphviz is installed; else every node of the DOT file must carry a position |
//! | `cargo test --workspace`, `cargo bench …` | not run: the first is this suite, the second a long benchmark |
//!
//! YAML blocks after `<!-- doc-test: plan -->`, `<!-- doc-test: ccl -->` or
//! `<!-- doc-test: file PATH -->` must load as a plan all of whose points
//! resolve, load as a ccl config, or equal that file; `plan NAME` and
//! `ccl NAME` also save the block as NAME for the file's commands.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one command may run (each runs on small inputs).
const LIMIT: Duration = Duration::from_secs(120);
/// The largest size an example runs with.
const SMALL: u64 = 16 << 10;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One example: where it is written, the command, and the error it must
/// end with (None: it must succeed).
#[derive(Debug, Clone, PartialEq)]
struct Example {
    at: String,
    command: String,
    error: Option<String>,
}

/// A checked block: where it is, what it must be, its text.
#[derive(Debug, Clone, PartialEq)]
struct Checked {
    at: String,
    kind: String,
    text: String,
}

/// The examples of markdown `text` from file `name`, grouped by block (a
/// block's commands share a scratch directory), and its checked YAML blocks.
fn extract(name: &str, text: &str) -> (Vec<Vec<Example>>, Vec<Checked>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut blocks, mut checked) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let Some(lang) = trimmed.strip_prefix("```") else {
            blocks.extend(inline(name, i + 1, lines[i]));
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or(lines.len());
        let body: Vec<&str> = lines[i + 1..end]
            .iter()
            .map(|l| l.get(indent..).unwrap_or(l.trim_start()))
            .collect();
        let marker = i.checked_sub(1).and_then(|k| {
            lines[k]
                .trim()
                .strip_prefix("<!-- doc-test: ")?
                .strip_suffix(" -->")
        });
        match (lang.trim(), marker) {
            (_, Some(kind)) => checked.push(Checked {
                at: format!("{name}:{}", i + 1),
                kind: kind.to_string(),
                text: body.join("\n") + "\n",
            }),
            ("sh" | "bash", _) => blocks.push(shell_block(name, i + 1, &body)),
            ("", _) => blocks.push(console_block(name, i + 1, &body)),
            _ => {}
        }
        i = end + 1;
    }
    blocks.retain(|b: &Vec<Example>| !b.is_empty());
    (blocks, checked)
}

/// Inline `cargo run …` spans of one line, each a block of its own.
fn inline(name: &str, line: usize, text: &str) -> Vec<Vec<Example>> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("cargo run "))
        .map(|s| {
            vec![Example {
                at: format!("{name}:{line}"),
                command: s.to_string(),
                error: None,
            }]
        })
        .collect()
}

/// A ```sh block: every line is a command (`\` continues it); `# error:`
/// comment lines after a command are the error it must end with.
fn shell_block(name: &str, first: usize, body: &[&str]) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut pending = String::new();
    for (k, line) in body.iter().enumerate() {
        let t = line.trim();
        if let Some(comment) = t.strip_prefix('#') {
            let comment = comment.trim();
            match (out.last_mut(), comment.strip_prefix("error:")) {
                (Some(last), Some(e)) => last.error = Some(e.trim().to_string()),
                (Some(last), None) if last.error.is_some() && pending.is_empty() => {
                    let e = last.error.as_mut().expect("checked");
                    e.push(' ');
                    e.push_str(comment);
                }
                _ => {}
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        let code = strip_comment(t);
        match code.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(code);
                out.push(Example {
                    at: format!("{name}:{}", first + k + 1),
                    command: std::mem::take(&mut pending).trim().to_string(),
                    error: None,
                });
            }
        }
    }
    out
}

/// A command line without its trailing `# comment` (outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (c, quote) {
            ('\'' | '"', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            ('#', None) if i > 0 && line[..i].ends_with(' ') => return line[..i].trim_end(),
            _ => {}
        }
    }
    line
}

/// A plain block: `$ ` lines are commands; output that starts with
/// `error:` is the error the command before it must end with.
fn console_block(name: &str, first: usize, body: &[&str]) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    for (k, line) in body.iter().enumerate() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Example {
                at: format!("{name}:{}", first + k + 1),
                command: cmd.trim().to_string(),
                error: None,
            });
        } else if let Some(last) = out.last_mut() {
            match (&mut last.error, line.strip_prefix("error: ")) {
                (None, Some(e)) => last.error = Some(e.to_string()),
                (Some(e), None) => {
                    e.push(' ');
                    e.push_str(line.trim());
                }
                _ => {}
            }
        }
    }
    out
}

/// Shell-like words: whitespace splits outside single or double quotes.
fn words(command: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in command.chars() {
        match (c, quote) {
            ('\'' | '"', None) => (quote, any) = (Some(c), true),
            (q, Some(open)) if q == open => quote = None,
            (c, None) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (c, _) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// What the harness runs for one command.
#[derive(Debug, PartialEq)]
enum Step {
    /// The kernbench binary with these arguments.
    Kernbench(Vec<String>),
    /// An example binary.
    Example(String, Vec<String>),
    /// `sh -c` of the line.
    Shell(String),
    /// Not run, and why.
    Skip(&'static str),
}

/// The step of a command as written (before the small-input mapping).
fn step(command: &str) -> Step {
    let command = command.replace("${SLURM_ARRAY_TASK_ID}", "1");
    let command = match command.split_once("&& ") {
        Some((head, rest)) if head.trim_start().starts_with("cd ") => rest.to_string(),
        _ => command,
    };
    let w = words(&command);
    let rest = |n: usize| w[n.min(w.len())..].to_vec();
    let has_shell = ['>', '|', ';'].iter().any(|c| command.contains(*c));
    match w.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["cargo", "run", "--release", "--", ..] if !has_shell => Step::Kernbench(rest(4)),
        ["cargo", "run", "--release", "--example", name, ..] => {
            Step::Example(name.to_string(), rest(5))
        }
        ["kernbench", ..] if !has_shell => Step::Kernbench(rest(1)),
        ["cargo", "test", ..] => Step::Skip("the test suite: the run this harness is part of"),
        ["cargo", "bench", ..] => Step::Skip("a criterion benchmark: minutes, not a doc check"),
        _ => Step::Shell(command),
    }
}

/// Examples to run in a block, `parallel … ::: V…` expanded into one
/// command per value.
fn expand(examples: &[Example]) -> Vec<Example> {
    let mut out = Vec::new();
    for e in examples {
        let w = words(&e.command);
        if w.first().map(String::as_str) != Some("parallel") {
            out.push(e.clone());
            continue;
        }
        let sep = w.iter().position(|x| x == ":::").unwrap_or(w.len());
        let template = w[..sep].last().cloned().unwrap_or_default();
        for v in &w[(sep + 1).min(w.len())..] {
            out.push(Example {
                command: template.replace("{}", v),
                ..e.clone()
            });
        }
    }
    out
}

/// Runs one example in `dir`; Err says what went wrong.
fn run_example(e: &Example, dir: &Path) -> Result<(), String> {
    let mut cmd = match step(&e.command) {
        Step::Skip(_) => return Ok(()),
        Step::Kernbench(args) => {
            let args = if e.error.is_some() {
                args
            } else {
                shrink(args, dir)?
            };
            let mut c = Command::new(env!("CARGO_BIN_EXE_kernbench"));
            c.args(args);
            c
        }
        Step::Example(name, args) => {
            let exe = Path::new(env!("CARGO_BIN_EXE_kernbench"))
                .with_file_name("examples")
                .join(&name);
            if !exe.exists() {
                return Err(format!("example binary {} is missing", exe.display()));
            }
            let mut c = Command::new(exe);
            c.args(args);
            c
        }
        Step::Shell(line) if line.starts_with("neato ") => return check_neato(&line, dir),
        Step::Shell(line) => {
            // A kernbench inside a pipeline is the test build too, never cargo.
            let bin = format!("{} ", env!("CARGO_BIN_EXE_kernbench"));
            let line = line.replace("cargo run --release -- ", &bin);
            let line = match line.strip_prefix("kernbench ") {
                Some(rest) => bin + rest,
                None => line,
            };
            let mut c = Command::new("sh");
            c.args(["-c", &line]);
            c
        }
    };
    let (code, stderr) = run_limited(cmd.current_dir(dir))?;
    match (&e.error, code) {
        (None, 0) => Ok(()),
        (None, c) => Err(format!("exit {c}: {stderr}")),
        (Some(_), 0) => Err("succeeded, but the docs show an error".into()),
        (Some(want), _) => {
            let got = squash(&stderr);
            let missing: Vec<&str> = want
                .split("...")
                .map(str::trim)
                .filter(|part| !part.is_empty() && !got.contains(&squash(part)))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("its error lacks {missing:?}: {stderr}"))
            }
        }
    }
}

/// Whitespace collapsed to single spaces.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs `cmd` for at most [`LIMIT`]: (exit code, stderr).
fn run_limited(cmd: &mut Command) -> Result<(i32, String), String> {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let err = reader.join().unwrap_or_default();
            return Ok((status.code().unwrap_or(-1), err));
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            return Err(format!("still running after {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `neato -Tsvg FILE.dot > OUT`: with Graphviz, run it; without, check the
/// file exists and is a graph with a position on every pinned node.
fn check_neato(line: &str, dir: &Path) -> Result<(), String> {
    let installed = Command::new("neato")
        .arg("-V")
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if installed {
        let (code, err) = run_limited(Command::new("sh").args(["-c", line]).current_dir(dir))?;
        return if code == 0 {
            Ok(())
        } else {
            Err(format!("exit {code}: {err}"))
        };
    }
    let file = words(line)
        .into_iter()
        .find(|w| w.ends_with(".dot"))
        .ok_or("no .dot file named")?;
    let text = std::fs::read_to_string(dir.join(&file)).map_err(|e| format!("{file}: {e}"))?;
    if !text.starts_with("graph ") || !text.contains("pos=\"") {
        return Err(format!("{file} is not a positioned graph"));
    }
    Ok(())
}

/// The small-input mapping of the module doc, applied to kernbench arguments.
fn shrink(mut args: Vec<String>, dir: &Path) -> Result<Vec<String>, String> {
    for i in 1..args.len() {
        let flag = args[i - 1].as_str();
        if [
            "--min-bytes",
            "-b",
            "--max-bytes",
            "-e",
            "--collective-bytes",
        ]
        .contains(&flag)
        {
            let bytes = kernbench::sweep::plan::parse_bytes(&args[i])?;
            args[i] = bytes.min(SMALL).to_string();
        }
    }
    match args.first().map(String::as_str) {
        Some("sweep") => small_plan(&mut args, dir)?,
        Some("merge") => make_shards(&args, dir)?,
        Some("bench") => {
            set(&mut args, "--sips", "16");
            set(&mut args, "--rounds", "4");
            if !args.iter().any(|a| a == "--no-build") {
                args.push("--no-build".into());
            }
        }
        Some("tp-mlp") => set(&mut args, "--tp", "1,2"),
        // The cube-mesh and full matrices are pinned by the exhaustive tests.
        Some("validate") => set(&mut args, "--matrix", "quick"),
        Some("train-step") => {
            set(&mut args, "--hidden", "64");
            set(&mut args, "--heads", "4");
            set(&mut args, "--seq", "64");
            // At most as many micro-batches as stages (1F1B's least).
            let value = |flag: &str| {
                let at = args.iter().position(|a| a == flag);
                at.and_then(|i| args.get(i + 1)?.parse::<u32>().ok())
            };
            if let Some(m) = value("--micro-batches") {
                let m = m.min(value("--pp").unwrap_or(1));
                set(&mut args, "--micro-batches", &m.to_string());
            }
        }
        Some("autotune") => small_autotune(&mut args, dir)?,
        Some("run" | "topo") => small_system(&mut args, dir)?,
        _ => {}
    }
    Ok(args)
}

/// `autotune`: sizes above 16K tuned at 16K, on the small system unless
/// the docs name one (then as `run`).
fn small_autotune(args: &mut Vec<String>, dir: &Path) -> Result<(), String> {
    if let Some(i) = args.iter().position(|a| a == "--sizes") {
        let sizes: Result<Vec<String>, String> = args[i + 1]
            .split(',')
            .map(|s| kernbench::sweep::plan::parse_bytes(s).map(|b| b.min(SMALL).to_string()))
            .collect();
        args[i + 1] = sizes?.join(",");
    }
    if args.iter().any(|a| a == "--preset" || a == "--system") {
        return small_system(args, dir);
    }
    let small = repo().join("tests/data/doc/small.yaml");
    args.extend(["--system".to_string(), small.display().to_string()]);
    Ok(())
}

/// Sets `flag`'s value, adding the flag when it is absent.
fn set(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(i) if i + 1 < args.len() => args[i + 1] = value.into(),
        _ => args.extend([flag.to_string(), value.to_string()]),
    }
}

/// `sweep`: the named plan must load; the tiny plan runs instead.
fn small_plan(args: &mut Vec<String>, dir: &Path) -> Result<(), String> {
    let at = args.iter().position(|a| a == "--plan");
    let plan = at.map_or("default".to_string(), |i| args[i + 1].clone());
    // A plan file the docs wrote in the scratch directory, or the repository's.
    let named = [dir.join(&plan), repo().join(&plan)]
        .into_iter()
        .find(|p| p.exists())
        .map_or(plan.clone(), |p| p.display().to_string());
    let tp = kernbench::tp::study::TpPlan::find(&named).map_err(|e| e.to_string())?;
    let train = kernbench::train::study::TrainPlan::find(&named).map_err(|e| e.to_string())?;
    if tp.is_none() && train.is_none() {
        kernbench::sweep::Plan::load(&named).map_err(|e| e.to_string())?;
    }
    let tiny = repo().join(match (tp.is_some(), train.is_some()) {
        (true, _) => "tests/data/doc/tiny_tp.yaml",
        (_, true) => "tests/data/doc/tiny_train.yaml",
        _ => "tests/data/doc/tiny.yaml",
    });
    set(args, "--plan", &tiny.display().to_string());
    if !args.iter().any(|a| a == "--out") {
        // Each example's results in a directory of its own, by a known name.
        static K: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = K.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        args.extend(["--out".to_string(), format!("results/doc-{k}")]);
    }
    Ok(())
}

/// `merge DIR… --out D`: inputs that do not exist are made as shards of
/// the tiny plan.
fn make_shards(args: &[String], dir: &Path) -> Result<(), String> {
    let out = args.iter().position(|a| a == "--out").unwrap_or(args.len());
    let inputs = &args[1..out];
    for (k, d) in inputs.iter().enumerate() {
        if dir.join(d).exists() {
            continue;
        }
        let tiny = repo().join("tests/data/doc/tiny.yaml");
        let shard = format!("{}/{}", k + 1, inputs.len());
        let mut c = Command::new(env!("CARGO_BIN_EXE_kernbench"));
        c.args([
            "sweep",
            "--plan",
            &tiny.display().to_string(),
            "--shard",
            &shard,
            "--out",
            d,
        ]);
        let (code, err) = run_limited(c.current_dir(dir))?;
        if code != 0 {
            return Err(format!("making shard {d}: exit {code}: {err}"));
        }
    }
    Ok(())
}

/// `run`/`topo` on more than 16 participants (cube leaders): the system
/// must load; the same system on 4 SIPs runs instead (a 2x2 grid for 2D
/// topologies: its links, memories and ideal flags are exercised as
/// written), or the small system when that still has more than 16.
fn small_system(args: &mut [String], dir: &Path) -> Result<(), String> {
    let flag = args.iter().position(|a| a == "--preset" || a == "--system");
    let Some(i) = flag else { return Ok(()) };
    let sys = match args[i].as_str() {
        "--preset" => kernbench::spec::presets::preset(&args[i + 1]),
        _ => kernbench::spec::System::from_file(&dir.join(&args[i + 1])),
    }
    .map_err(|e| e.to_string())?;
    if sys.spec.system.sips.count * sys.cubes_per_sip() > 16 {
        let small =
            four_sips(&sys, dir).unwrap_or_else(|| repo().join("tests/data/doc/small.yaml"));
        args[i] = "--system".into();
        args[i + 1] = small.display().to_string();
    }
    Ok(())
}

/// `sys` on 4 SIPs, written to `dir`, if that is valid and has at most 16
/// participants.
fn four_sips(sys: &kernbench::spec::System, dir: &Path) -> Option<PathBuf> {
    let mut spec = sys.spec.clone();
    let sips = &mut spec.system.sips;
    sips.count = 4;
    if sips.w.is_some() || sips.h.is_some() {
        (sips.w, sips.h) = (Some(2), Some(2));
    }
    let small = kernbench::spec::System::from_spec(spec, "4 SIPs").ok()?;
    if small.spec.system.sips.count * small.cubes_per_sip() > 16 {
        return None;
    }
    let path = dir.join("four_sips.yaml");
    std::fs::write(&path, serde_yaml::to_string(&small.spec).ok()?).ok()?;
    Some(path)
}

/// A scratch directory with `configs/` and `tests/` of the repository.
fn scratch() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("a scratch directory");
    for sub in ["configs", "tests"] {
        std::os::unix::fs::symlink(repo().join(sub), d.path().join(sub)).expect("a link");
    }
    d
}

/// Every failure of the examples and checked blocks of `text` (file
/// `name`). Each block's commands share a scratch directory, which first
/// gets the checked blocks that name a file to be saved as (`plan my.yaml`).
fn failures(name: &str, text: &str) -> Vec<String> {
    let (blocks, checked) = extract(name, text);
    let mut out = Vec::new();
    let mut saved = Vec::new();
    for c in &checked {
        if let Err(why) = check_block(c) {
            out.push(format!("{} ({}): {why}", c.at, c.kind));
        }
        if let Some((_, save_as)) = c.kind.split_once(' ').filter(|(k, _)| *k != "file") {
            saved.push((save_as.to_string(), c.text.clone()));
        }
    }
    for block in &blocks {
        let dir = scratch();
        for (file, text) in &saved {
            std::fs::write(dir.path().join(file), text).expect("a scratch file");
        }
        for e in expand(block) {
            let started = Instant::now();
            if let Err(why) = run_example(&e, dir.path()) {
                out.push(format!("{}: `{}`: {why}", e.at, e.command));
            }
            // The slow ones, for whoever keeps the suite fast.
            let secs = started.elapsed().as_secs_f64();
            if secs > 2.0 {
                eprintln!("{}: {secs:.1} s: {}", e.at, e.command);
            }
        }
    }
    out
}

/// A checked YAML block against what its marker says it is.
fn check_block(c: &Checked) -> Result<(), String> {
    let kind = c.kind.split(' ').next().unwrap_or_default();
    match c.kind.split_once(' ') {
        Some(("file", path)) => {
            let want = std::fs::read_to_string(repo().join(path)).map_err(|e| e.to_string())?;
            (want == c.text)
                .then_some(())
                .ok_or_else(|| format!("differs from {path}"))
        }
        _ if kind == "ccl" => kernbench::ccl::CclConfig::from_yaml(&c.text, &c.at)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ if kind == "plan" => {
            let plan =
                kernbench::sweep::Plan::from_yaml(&c.text, &c.at).map_err(|e| e.to_string())?;
            let bad: Vec<String> = plan
                .points()
                .iter()
                .filter_map(|p| plan.resolve(p).err().map(|e| format!("{}: {e}", p.label())))
                .collect();
            bad.is_empty()
                .then_some(())
                .ok_or_else(|| format!("{} point(s) do not resolve, e.g. {}", bad.len(), bad[0]))
        }
        _ => Err(format!("unknown doc-test marker '{}'", c.kind)),
    }
}

#[test]
fn every_shell_example_in_the_docs_runs() {
    let mut all = Vec::new();
    let mut files = vec![repo().join("README.md"), repo().join("benches/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut examples = 0;
    for f in &files {
        let name = f.strip_prefix(repo()).unwrap_or(f).display().to_string();
        let text = std::fs::read_to_string(f).expect("a doc");
        examples += extract(&name, &text).0.iter().map(Vec::len).sum::<usize>();
        all.extend(failures(&name, &text));
    }
    assert!(examples >= 30, "only {examples} examples found");
    assert!(
        all.is_empty(),
        "{} example(s) fail:\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn the_harness_fails_a_broken_example_and_names_it() {
    let doc = "# t\n\n```sh\ncargo run --release -- run --algorithm nosuch   # broken on purpose\ncargo run --release -- list presets\n```\n\n```\n$ kernbench run --preset nosuch\nerror: --preset: nosuch: no preset named 'nosuch'\n```\n\nRun `cargo run --release -- topo --preset mesh_16 --oops` inline.\n";
    let (blocks, _) = extract("t.md", doc);
    let commands: Vec<&str> = blocks
        .iter()
        .flatten()
        .map(|e| e.command.as_str())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run --release -- run --algorithm nosuch",
            "cargo run --release -- list presets",
            "kernbench run --preset nosuch",
            "cargo run --release -- topo --preset mesh_16 --oops",
        ]
    );
    let failed = failures("t.md", doc);
    assert_eq!(failed.len(), 2, "{failed:#?}");
    assert!(
        failed[0].starts_with("t.md:4: `cargo run --release -- run --algorithm nosuch`: exit 2"),
        "{}",
        failed[0]
    );
    assert!(
        failed[0].contains("no algorithm entry named 'nosuch'"),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].starts_with("t.md:13: `cargo run --release -- topo --preset mesh_16 --oops`"),
        "{}",
        failed[1]
    );
    // An example that must fail but succeeds, or fails differently, is caught too.
    let wrong = "```\n$ kernbench list presets\nerror: something\n$ kernbench run --preset nosuch\nerror: another message\n```\n";
    let failed = failures("w.md", wrong);
    assert_eq!(failed.len(), 2, "{failed:#?}");
    assert!(
        failed[0].contains("succeeded, but the docs show an error"),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].contains("its error lacks [\"another message\"]"),
        "{}",
        failed[1]
    );
}

#[test]
fn the_small_input_mapping_is_the_documented_one() {
    let d = scratch();
    let s = |line: &str| match step(line) {
        Step::Kernbench(args) => shrink(args, d.path()).unwrap().join(" "),
        other => format!("{other:?}"),
    };
    let small = repo()
        .join("tests/data/doc/small.yaml")
        .display()
        .to_string();
    assert_eq!(
        s("cargo run --release -- run --preset torus_4096 -b 1M -e 64M"),
        format!("run --system {small} -b 16384 -e 16384")
    );
    assert_eq!(
        s("kernbench topo --preset torus_6_rect"),
        format!("topo --system {small}")
    );
    assert_eq!(
        s("kernbench run --preset mesh_16 -e 2K"),
        format!("run --system {small} -e 2048")
    );
    // A lean system (one cube per SIP) keeps its ideal links on 4 SIPs.
    let lean = d.path().join("four_sips.yaml");
    assert_eq!(
        s("kernbench run --preset ring_4096_lean -e 64M"),
        format!("run --system {} -e 16384", lean.display())
    );
    let four = kernbench::spec::System::from_file(&lean).unwrap();
    let want = kernbench::spec::presets::preset("ring_4096_lean").unwrap();
    assert_eq!(four.spec.system.sips.count, 4);
    assert_eq!(four.spec.links, want.spec.links);
    assert_eq!(four.spec.memory, want.spec.memory);
    assert_eq!(
        s("kernbench bench"),
        "bench --sips 16 --rounds 4 --no-build"
    );
    assert_eq!(s("kernbench tp-mlp --tp 1,2,4,8"), "tp-mlp --tp 1,2");
    assert_eq!(
        s("kernbench validate --matrix cubes --jobs 2"),
        "validate --matrix quick --jobs 2"
    );
    assert_eq!(
        s("kernbench train-step --tp 4 --hidden 4096 --seq 2048"),
        "train-step --tp 4 --hidden 64 --seq 64 --heads 4"
    );
    assert!(
        s("kernbench sweep --plan tp --out tp/").ends_with("tests/data/doc/tiny_tp.yaml --out tp/")
    );
    assert!(s("kernbench sweep").contains("tests/data/doc/tiny.yaml --out results/doc-"));
    assert_eq!(
        step("cd kernbench && cargo run --release -- sweep --plan large --shard {}/3"),
        Step::Kernbench(words("sweep --plan large --shard {}/3"))
    );
    assert_eq!(
        step("cargo test --workspace"),
        Step::Skip("the test suite: the run this harness is part of")
    );
    let par = Example {
        at: "x".into(),
        command: "parallel -S h1,h2 'cd k && kernbench sweep --shard {}/2' ::: 1 2".into(),
        error: None,
    };
    let cmds: Vec<String> = expand(&[par]).into_iter().map(|e| e.command).collect();
    assert_eq!(
        cmds,
        [
            "cd k && kernbench sweep --shard 1/2",
            "cd k && kernbench sweep --shard 2/2"
        ]
    );
    // A plan that does not exist fails before anything runs.
    let e = shrink(words("sweep --plan big"), d.path()).unwrap_err();
    assert!(e.contains("no built-in plan of that name"), "{e}");
}
