//! A CSV of every message a run delivers, written as the run goes: what it
//! carried, between which nodes, when it was sent and when its last byte
//! arrived. Per-message latencies, and the way to see where the packet and
//! the flow model part (run both and join the rows). Memory stays at one
//! row's buffer, whatever the run's size.

use crate::output::AtomicFile;
use kernbench_spec::topology::Topology;
use kernbench_systems::network::Arrival;
use kernbench_systems::trace::{OpRecord, PacketSpan, TraceSink};
use std::any::Any;
use std::path::{Path, PathBuf};

/// The columns, in order.
pub const MESSAGE_COLUMNS: [&str; 10] = [
    "id",
    "purpose",
    "src",
    "dst",
    "bytes",
    "sent_tick",
    "arrived_tick",
    "ticks",
    "sent_us",
    "arrived_us",
];

/// A message log being written as the run goes.
pub struct MessageLog {
    path: PathBuf,
    out: csv::Writer<AtomicFile>,
    topology: Topology,
    tick_ns: f64,
    rows: u64,
    /// The first write error; later rows are dropped and `finish` reports it.
    error: Option<csv::Error>,
}

impl MessageLog {
    /// Creates the file at `path` and writes the header; `topology` names
    /// the nodes, `tick_ns` converts ticks to microseconds.
    pub fn create(path: &Path, topology: Topology, tick_ns: f64) -> Result<Self, String> {
        let file = AtomicFile::create(path).map_err(|e| {
            format!(
                "--messages {}: cannot create the file ({e}); allowed: a writable file path",
                path.display()
            )
        })?;
        let mut out = csv::Writer::from_writer(file);
        let error = out.write_record(MESSAGE_COLUMNS).err();
        Ok(MessageLog {
            path: path.to_path_buf(),
            out,
            topology,
            tick_ns,
            rows: 0,
            error,
        })
    }

    /// Flushes and puts the file in place; returns the rows written.
    pub fn finish(mut self) -> Result<u64, String> {
        let what = |e: &dyn std::fmt::Display| format!("--messages {}: {e}", self.path.display());
        if let Some(e) = &self.error {
            return Err(what(e));
        }
        self.out.flush().map_err(|e| what(&e))?;
        let file = self.out.into_inner().map_err(|e| what(e.error()))?;
        file.commit().map_err(|e| what(&e))?;
        Ok(self.rows)
    }

    fn us(&self, t: u64) -> String {
        format!("{:.3}", t as f64 * self.tick_ns / 1e3)
    }
}

impl TraceSink for MessageLog {
    fn op(&mut self, _: &OpRecord) {}

    fn packet(&mut self, _: &PacketSpan) {}

    fn message(&mut self, a: &Arrival) {
        if self.error.is_some() {
            return;
        }
        let row = [
            a.id.0.to_string(),
            format!("{:?}", a.purpose),
            self.topology.node(a.src).to_string(),
            self.topology.node(a.dst).to_string(),
            a.bytes.to_string(),
            a.injected_at.to_string(),
            a.at.to_string(),
            (a.at - a.injected_at).to_string(),
            self.us(a.injected_at),
            self.us(a.at),
        ];
        match self.out.write_record(&row) {
            Ok(()) => self.rows += 1,
            Err(e) => self.error = Some(e),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
