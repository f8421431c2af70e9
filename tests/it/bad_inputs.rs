//! The bad-input corpus, tests/data/bad_inputs: system specs, ccl configs
//! and sweep plans (one file each) and command lines (cli.yaml). Every case
//! must be refused at once, without a panic, by a message that names the
//! field and says what is allowed. Add a case by adding a file (first lines
//! `# corpus: what the user did.` and `# expect: PATH | FIX [| PROBLEM]`,
//! `# <-- HERE` on the line the error must point at) or a cli.yaml entry.
//! A spec or ccl error must point at exactly the marked line, and have no line
//! when the file has no marker; a plan error's line, often unknown, is checked
//! when it has one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kernbench::ccl::CclConfig;
use kernbench::spec::{SpecError, System};
use kernbench::sweep::plan::Plan;

/// No case may take longer than this to be refused (a hang guard, not a
/// speed target: refusals take milliseconds).
const LIMIT: Duration = Duration::from_secs(20);

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad_inputs")
}

/// `f` on a thread; fails if it does not return within [`LIMIT`].
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(v) => v,
        Err(_) => panic!("{what}: not refused within {LIMIT:?}"),
    }
}

/// What a corpus file's `# expect:` line asks of its error.
struct Expect {
    path: String,
    fix: String,
    problem: Option<String>,
    /// The 1-based line marked `<-- HERE`, if any.
    line: Option<usize>,
}

fn expectation(text: &str, file: &Path) -> Expect {
    let head = text
        .lines()
        .find_map(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{}: no `# expect:` line", file.display()));
    let mut parts = head.split(" | ").map(str::trim);
    let mut next = || parts.next().map(str::to_string);
    Expect {
        path: next().expect("a path"),
        fix: next().unwrap_or_else(|| panic!("{}: no fix in `# expect:`", file.display())),
        problem: next(),
        line: marked_line(text, file),
    }
}

/// The 1-based line marked `<-- HERE` (at most one), or None when unmarked.
fn marked_line(text: &str, file: &Path) -> Option<usize> {
    let marks: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("<-- HERE"))
        .map(|(i, _)| i + 1)
        .collect();
    assert!(
        marks.len() <= 1,
        "{}: more than one <-- HERE",
        file.display()
    );
    marks.first().copied()
}

/// Differences between an error and its expectation (empty when it matches).
/// With `exact_line` the error's line must be the marked one, and an unmarked
/// file's error must have none; without, a line is checked only when both exist.
fn mismatches(file: &Path, e: &SpecError, want: &Expect, exact_line: bool) -> Vec<String> {
    let shown = e.to_string();
    let loc = e.line.map(|l| format!(":{l}")).unwrap_or_default();
    let head = format!("{}{loc}: {}: ", file.display(), want.path);
    let mut out = Vec::new();
    if !shown.starts_with(&head) {
        out.push(format!("the message does not start with {head:?}"));
    }
    if e.path != want.path {
        out.push(format!("path {:?}, expected {:?}", e.path, want.path));
    }
    if !e.allowed.contains(&want.fix) {
        out.push(format!("the fix lacks {:?}", want.fix));
    }
    if let Some(p) = &want.problem
        && !e.problem.contains(p)
    {
        out.push(format!("the problem lacks {p:?}"));
    }
    if e.problem.is_empty() || !shown.ends_with(&format!("; allowed: {}", e.allowed)) {
        out.push("not of the form `file: path: problem; allowed: fix`".to_string());
    }
    let lines_differ = match (e.line, want.line) {
        (Some(got), Some(marked)) => got != marked,
        (got, marked) => exact_line && got != marked,
    };
    if lines_differ {
        out.push(format!(
            "line {:?}, but <-- HERE marks {:?}",
            e.line, want.line
        ));
    }
    out
}

/// Loads every file of `kind` with `load`; each must fail as its header says
/// (`exact_line`: see [`mismatches`]).
fn check_dir(kind: &str, exact_line: bool, load: fn(&Path) -> Result<(), SpecError>) -> usize {
    let dir = corpus().join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let want = expectation(&text, file);
        let path = file.clone();
        let got = within(&file.display().to_string(), move || load(&path));
        match got {
            Ok(()) => failures.push(format!("{}: accepted", file.display())),
            Err(e) => {
                let diff = mismatches(file, &e, &want, exact_line);
                if !diff.is_empty() {
                    failures.push(format!("{}: {}\n    {e}", file.display(), diff.join("; ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    files.len()
}

#[test]
fn every_bad_spec_names_its_field_and_fix() {
    let n = check_dir("spec", true, |p| System::from_file(p).map(|_| ()));
    assert!(n >= 67, "{n} spec cases");
}

#[test]
fn every_bad_ccl_config_names_its_field_and_fix() {
    let n = check_dir("ccl", true, |p| CclConfig::from_file(p).map(|_| ()));
    assert!(n >= 42, "{n} ccl cases");
}

#[test]
fn every_bad_plan_names_its_field_and_fix() {
    let n = check_dir("plan", false, |p| {
        Plan::load(p.to_str().expect("a UTF-8 path")).map(|_| ())
    });
    assert!(n >= 30, "{n} plan cases");
}

/// One command line of cli.yaml.
#[derive(serde::Deserialize)]
struct CliCase {
    args: Vec<String>,
    expect: Vec<String>,
}

/// The files the placeholders of cli.yaml stand for.
struct Scratch {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    out: PathBuf,
    big: PathBuf,
    deep: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a-directory");
        std::fs::create_dir(&dir).unwrap();
        let big = tmp.path().join("big.yaml");
        let line = "# padding\n".repeat(1 << 10);
        std::fs::write(&big, line.repeat(1700)).unwrap();
        let deep = tmp.path().join("deep.yaml");
        std::fs::write(&deep, format!("system: {}", "[".repeat(10_000))).unwrap();
        Scratch {
            out: tmp.path().join("out"),
            _tmp: tmp,
            dir,
            big,
            deep,
        }
    }

    fn fill(&self, arg: &str) -> String {
        let path = |p: &PathBuf| p.display().to_string();
        arg.replace("{dir}", &path(&self.dir))
            .replace("{out}", &path(&self.out))
            .replace("{big}", &path(&self.big))
            .replace("{deep}", &path(&self.deep))
    }
}

/// Runs the binary; kills it past [`LIMIT`]. (exit code, stderr)
fn kernbench(args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kernbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kernbench binary runs");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > LIMIT {
            child.kill().unwrap();
            panic!("kernbench {}: not refused within {LIMIT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn every_bad_command_line_names_its_flag_and_fix() {
    let text = std::fs::read_to_string(corpus().join("cli.yaml")).unwrap();
    let cases: Vec<CliCase> = serde_yaml::from_str(&text).unwrap();
    assert!(cases.len() >= 40, "{} command-line cases", cases.len());
    let scratch = Scratch::new();
    let mut failures = Vec::new();
    for case in &cases {
        let args: Vec<String> = case.args.iter().map(|a| scratch.fill(a)).collect();
        let (code, stderr) = kernbench(&args);
        let mut diff = Vec::new();
        if code != Some(2) {
            diff.push(format!("exit {code:?}, expected 2"));
        }
        if !stderr.starts_with("error: ") || stderr.contains("panicked") {
            diff.push("stderr does not start with `error: ` or shows a panic".into());
        }
        for want in &case.expect {
            if !stderr.contains(&scratch.fill(want)) {
                diff.push(format!("lacks {want:?}"));
            }
        }
        if !diff.is_empty() {
            failures.push(format!(
                "kernbench {}: {}\n    {}",
                args.join(" "),
                diff.join("; "),
                stderr.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_corpus_holds_at_least_261_cases() {
    let files: usize = ["spec", "ccl", "plan"]
        .iter()
        .map(|k| std::fs::read_dir(corpus().join(k)).unwrap().count())
        .sum();
    let text = std::fs::read_to_string(corpus().join("cli.yaml")).unwrap();
    let cli = serde_yaml::from_str::<Vec<CliCase>>(&text).unwrap().len();
    assert!(files + cli >= 261, "{files} files + {cli} command lines");
}
