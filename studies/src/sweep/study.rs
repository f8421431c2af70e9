//! What a study is, for the one runner ([`super::run::run`]) that runs any of
//! them: its points, how one point runs into a row, its estimate per point,
//! and how the rows become tables and figures. The collective sweep
//! ([`super::Plan`]) is one; the TP study (`tp::study::TpStudy`) another.

use kernbench_ccl::estimate::Budget;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A point of a study: where it stands in the study's expansion order, a
/// stable id (its point file's name) and a label for messages.
pub trait StudyPoint {
    /// Position in the expansion order: stable across runs and shards.
    fn index(&self) -> usize;
    /// A stable id of the point's values (the same point always has it).
    fn id(&self) -> String;
    fn label(&self) -> String;
}

/// A row, as its point file holds it: it names the point it is of.
pub trait StudyRow {
    fn index(&self) -> usize;
    fn id(&self) -> &str;
}

/// What a TP or GEMM point's file holds: its identity and its row, or the
/// error that stopped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "R: Serialize", deserialize = "R: DeserializeOwned"))]
pub struct Record<R> {
    pub index: usize,
    pub id: String,
    pub point: String,
    /// None if the point failed; its CSV line (exact floats).
    #[serde(with = "csv_line")]
    pub row: Option<R>,
    /// Empty unless the point failed.
    pub error: String,
}

impl<R> Record<R> {
    /// The record of `p`: its row, or its error on one line.
    pub fn of(p: &impl StudyPoint, result: Result<R, String>) -> Record<R> {
        let (row, error) = match result {
            Ok(row) => (Some(row), String::new()),
            Err(e) => (None, e.replace('\n', " | ")),
        };
        Record {
            index: p.index(),
            id: p.id(),
            point: p.label(),
            row,
            error,
        }
    }
}

/// The rows of the records whose points ran, in order.
pub fn rows_that_ran<'a, R: Clone + 'a>(
    records: impl IntoIterator<Item = &'a Record<R>>,
) -> Vec<R> {
    records.into_iter().filter_map(|r| r.row.clone()).collect()
}

impl<R> StudyRow for Record<R> {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> &str {
        &self.id
    }
}

/// What a study's result set is fingerprinted by (resume refuses another),
/// and the input files saved beside its results.
pub struct Inputs {
    pub plan_text: String,
    pub plan_origin: String,
    pub system_yaml: String,
    pub ccl_text: String,
    pub ccl_origin: String,
    /// (file name, contents) written into the result directory.
    pub files: Vec<(&'static str, String)>,
}

impl Inputs {
    /// The inputs of a study that runs on the embedded ccl config and
    /// writes no extra files.
    pub fn with_embedded_ccl(plan_text: String, plan_origin: String, system_yaml: String) -> Self {
        Inputs {
            plan_text,
            plan_origin,
            system_yaml,
            ccl_text: kernbench_ccl::config::DEFAULT_CCL_YAML.into(),
            ccl_origin: "<embedded ccl.yaml>".into(),
            files: Vec::new(),
        }
    }
}

/// What a point's run may use besides the point: its share of the memory
/// budget, and where `auto` collectives keep the tuner's decisions.
pub struct PointEnv<'a> {
    pub budget: &'a Budget,
    pub autotune_cache: Option<&'a Path>,
}

/// A study: points, each run in its own world into a row; rows into tables
/// and figures. Results never draw figures: the runner writes the tables,
/// then the figures from the same point files.
pub trait Study: Sync {
    type Point: StudyPoint + Send + Sync;
    type Row: StudyRow + Serialize + DeserializeOwned + Send;
    /// Every point, in expansion order.
    fn points(&self) -> Vec<Self::Point>;
    /// The estimated seconds to simulate a point (scheduling, ETA, budget).
    fn estimate_seconds(&self, p: &Self::Point) -> f64;
    /// The point's (axis, value) pairs, kept in its point file.
    fn axes(&self, p: &Self::Point) -> Vec<(String, String)>;
    /// Runs a point; a failure is a row with its error, never a panic.
    fn run_point(&self, p: &Self::Point, env: &PointEnv) -> Self::Row;
    /// The row of a point whose run panicked (`error` says why).
    fn failed(&self, p: &Self::Point, error: String) -> Self::Row;
    /// What the progress bar shows after a row.
    fn progress_note(&self, row: &Self::Row) -> String;
    /// The fingerprint's inputs and the input files to save.
    fn inputs(&self, ccl_text: &str, ccl_origin: &str) -> Inputs;
    /// Writes the tables (CSV, JSON) of the finished points; returns their
    /// rows as the tables hold them.
    fn write_tables(
        &self,
        dir: &Path,
        files: &[PointFile<Self::Row>],
    ) -> Result<Vec<Self::Row>, String>;
    /// Draws the figures from the finished points' rows; returns the files.
    fn write_figures(
        &self,
        dir: &Path,
        files: &[PointFile<Self::Row>],
    ) -> Result<Vec<String>, String>;
}

/// What `points/<index>-<id>.json` holds: the row, the point's axis values
/// and the simulator's own cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointFile<R> {
    pub row: R,
    /// The point's (axis, value) assignments in plan order (empty in point
    /// files written before it existed).
    #[serde(default)]
    pub axes: Vec<(String, String)>,
    pub wall_ms: f64,
    pub peak_mb: f64,
}

/// Every finished point of a result directory, in expansion order.
pub fn load_files<R: StudyRow + DeserializeOwned>(dir: &Path) -> Result<Vec<PointFile<R>>, String> {
    let points = dir.join("points");
    let rd = std::fs::read_dir(&points).map_err(|e| format!("{}: {e}", points.display()))?;
    let mut out = Vec::new();
    for entry in rd {
        let path = entry
            .map_err(|e| format!("{}: {e}", points.display()))?
            .path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: unreadable point file ({e}); `kernbench sweep --resume --out {}` with the same plan runs that point again",
                path.display(),
                dir.display()
            )
        })?);
    }
    out.sort_by_key(|p: &PointFile<R>| p.row.index());
    Ok(out)
}

/// Writes a study's tables, then its figures, from the point files in
/// `dir`; returns the tables' rows.
pub fn consolidate<S: Study>(study: &S, dir: &Path) -> Result<Vec<S::Row>, String> {
    let files = load_files::<S::Row>(dir)?;
    let rows = study.write_tables(dir, &files)?;
    study.write_figures(dir, &files)?;
    Ok(rows)
}

/// `rows` as CSV, a header line first: what every results.csv and `--csv`
/// table holds.
pub fn csv_rows<T: Serialize>(rows: &[T]) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// (De)serializes a study's optional row as its CSV line, the text
/// results.csv holds: exact for every f64, where serde_json reads some
/// 17-digit floats one unit in the last place off. For `#[serde(with)]`.
pub mod csv_line {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        row: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let Some(row) = row else {
            return s.serialize_none();
        };
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.serialize(row).map_err(S::Error::custom)?;
        let bytes = w.into_inner().map_err(S::Error::custom)?;
        let line = String::from_utf8(bytes).map_err(S::Error::custom)?;
        s.serialize_some(line.trim_end_matches('\n'))
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        let Some(line) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(line.as_bytes());
        match r.deserialize().next() {
            Some(row) => row.map(Some).map_err(D::Error::custom),
            None => Err(D::Error::custom("an empty row")),
        }
    }
}
