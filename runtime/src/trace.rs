//! Chrome trace-event export (open in Perfetto or chrome://tracing), written
//! while the simulation runs: the engine hands each op, packet and message
//! to [`ChromeTrace`] as it completes, and it goes straight to the file.
//! Memory stays at what is in flight (ops waiting for an earlier op of their
//! PE, messages on the way, one end tick per track), whatever the run's size.
//!
//! Tracks: one process per SIP; per PE, "ops" tracks for ops that complete
//! in order (compute, local load/store) and "async" tracks for ops that
//! complete later (send, recv, remote load/store). Slices are packed into as
//! many tracks of each kind as overlap requires, so no two slices on one
//! track overlap (the trace format forbids partial overlap; Perfetto drops
//! such slices). One "links" process has a track per used link, named
//! source -> destination; a link serves one packet at a time, so its slices
//! never overlap. Flow arrows join each send op to the recv op that takes
//! its data, and a message's first packet slice to its last.

use crate::machine::Machine;
use kernbench_systems::Tick;
use kernbench_systems::network::{Arrival, LinkId, MsgId};
use kernbench_systems::trace::{OpRecord, PacketSpan, TraceSink};
use rustc_hash::FxHashMap;
use serde_json::json;
use std::any::Any;
use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Process id of the links process.
const LINKS_PID: u64 = 1_000_000;
/// Process id of the ranks process (host-level works, `rank_work`).
const RANKS_PID: u64 = 1_000_001;
/// Flow ids of messages have this bit set (op flows are queue << 32 | k).
const MESSAGE_FLOW: u64 = 1 << 63;

/// A link's track (thread id) in the links process: its link id.
fn link_tid(l: LinkId) -> u64 {
    u64::from(l.0)
}

/// Tracks of one kind on one PE: each track's id and the end of its last slice.
type Tracks = Vec<(u64, Tick)>;

/// A trace file being written as the run goes.
pub struct ChromeTrace {
    path: PathBuf,
    out: BufWriter<crate::output::AtomicFile>,
    tick_ns: f64,
    events: u64,
    /// The first write error; later events are dropped and `finish` reports it.
    error: Option<std::io::Error>,
    /// Per (sip, cube, pe, asynchronous): its tracks.
    tracks: FxHashMap<(u32, u32, u32, bool), Tracks>,
    next_tid: u64,
    named_sips: BTreeSet<u32>,
    /// Per link: whether a packet crossed it (its track gets a name).
    used_links: Vec<bool>,
    /// Per message in flight: its first and latest packet slice (link, middle tick).
    in_flight: FxHashMap<MsgId, [(LinkId, f64); 2]>,
    /// Per (rank, kind): the tracks of the ranks process.
    rank_tracks: std::collections::BTreeMap<(u32, String), Tracks>,
}

impl ChromeTrace {
    /// Creates the file at `path`; `tick_ns` converts ticks to the file's microseconds.
    pub fn create(path: &Path, tick_ns: f64) -> Result<Self, String> {
        let file = crate::output::AtomicFile::create(path).map_err(|e| {
            format!(
                "--trace {}: cannot create the trace file ({e}); allowed: a writable file path",
                path.display()
            )
        })?;
        let mut t = ChromeTrace {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            tick_ns,
            events: 0,
            error: None,
            tracks: FxHashMap::default(),
            next_tid: 1,
            named_sips: BTreeSet::new(),
            used_links: Vec::new(),
            in_flight: FxHashMap::default(),
            rank_tracks: Default::default(),
        };
        t.raw(b"{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
        t.meta(
            json!({"ph": "M", "name": "process_name", "pid": LINKS_PID, "args": {"name": "links"}}),
        );
        Ok(t)
    }

    /// Names the link tracks used, closes the JSON and flushes; returns the
    /// number of events written.
    pub fn finish(mut self, m: &Machine) -> Result<u64, String> {
        let table = m.engine.links();
        let used = std::mem::take(&mut self.used_links);
        for l in table.ids().filter(|l| used.get(l.index()) == Some(&true)) {
            let (a, b) = table.endpoints(l);
            let name = format!(
                "{} -> {} ({})",
                m.topology.node(a),
                m.topology.node(b),
                table.class(l).name
            );
            self.meta(json!({"ph": "M", "name": "thread_name", "pid": LINKS_PID, "tid": link_tid(l), "args": {"name": name}}));
        }
        self.raw(b"\n]}\n");
        if self.error.is_none()
            && let Err(e) = self.out.flush()
        {
            self.error = Some(e);
        }
        if let Some(e) = self.error {
            return Err(format!("--trace {}: {e}", self.path.display()));
        }
        let file = self
            .out
            .into_inner()
            .map_err(|e| format!("--trace {}: {}", self.path.display(), e.error()))?;
        file.commit()
            .map_err(|e| format!("--trace {}: {e}", self.path.display()))?;
        Ok(self.events)
    }

    /// A work a rank ran (a kernel launch, a collective, a message), on
    /// the "ranks" process: tracks named `rank R KIND #i`, as many per rank
    /// and kind as overlapping works need, sorted by rank.
    pub fn rank_work(&mut self, rank: u32, kind: &str, name: &str, start: Tick, end: Tick) {
        if self.rank_tracks.is_empty() {
            self.meta(json!({"ph": "M", "name": "process_name", "pid": RANKS_PID, "args": {"name": "ranks"}}));
        }
        let tracks = self
            .rank_tracks
            .entry((rank, kind.to_string()))
            .or_default();
        let tid = match tracks.iter_mut().find(|t| t.1 <= start) {
            Some(t) => {
                t.1 = end;
                t.0
            }
            None => {
                let tid = self.next_tid;
                self.next_tid += 1;
                tracks.push((tid, end));
                let label = format!("rank {rank} {kind} #{}", tracks.len() - 1);
                let sort = u64::from(rank) << 32 | tid;
                self.meta(json!({"ph": "M", "name": "thread_name", "pid": RANKS_PID, "tid": tid, "args": {"name": label}}));
                self.meta(json!({"ph": "M", "name": "thread_sort_index", "pid": RANKS_PID, "tid": tid, "args": {"sort_index": sort}}));
                tid
            }
        };
        let name = name.replace(['"', '\\'], "");
        self.slice(
            format_args!("{name}"),
            kind,
            RANKS_PID,
            tid,
            start,
            end,
            |_| Ok(()),
        );
    }

    /// Microseconds (the file's unit) of a tick count, whole or not.
    fn us(&self, ticks: f64) -> f64 {
        ticks * self.tick_ns / 1000.0
    }

    fn raw(&mut self, bytes: &[u8]) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(bytes)
        {
            self.error = Some(e);
        }
    }

    fn separator(&mut self) {
        if self.events > 0 {
            self.raw(b",\n");
        }
        self.events += 1;
    }

    fn meta(&mut self, ev: serde_json::Value) {
        self.separator();
        if self.error.is_none()
            && let Err(e) = serde_json::to_writer(&mut self.out, &ev)
        {
            self.error = Some(e.into());
        }
    }

    /// A complete slice; `name` needs no JSON escaping, `args` is written
    /// by `write_args` (an object's members, without braces).
    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        name: std::fmt::Arguments,
        cat: &str,
        pid: u64,
        tid: u64,
        start: Tick,
        end: Tick,
        write_args: impl FnOnce(&mut BufWriter<crate::output::AtomicFile>) -> std::io::Result<()>,
    ) {
        self.separator();
        let (ts, dur) = (self.us(start as f64), self.us((end - start) as f64));
        if self.error.is_some() {
            return;
        }
        let out = &mut self.out;
        let r = (|| {
            write!(
                out,
                "{{\"ph\":\"X\",\"name\":\"{name}\",\"cat\":\"{cat}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts},\"dur\":{dur},\"args\":{{"
            )?;
            write_args(out)?;
            out.write_all(b"}}")
        })();
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// The track for a slice of PE (sip, cube, pe) starting at `start`:
    /// the first of its kind whose last slice has ended, else a new one.
    fn track(&mut self, r: &OpRecord, end: Tick) -> u64 {
        let key = (r.sip, r.cube, r.pe, r.asynchronous);
        let tracks = self.tracks.entry(key).or_default();
        if let Some(t) = tracks.iter_mut().find(|t| t.1 <= r.start) {
            t.1 = end;
            return t.0;
        }
        let tid = self.next_tid;
        self.next_tid += 1;
        tracks.push((tid, end));
        let kind = if r.asynchronous { "async" } else { "ops" };
        let name = format!("cube{}.pe{} {kind} #{}", r.cube, r.pe, tracks.len() - 1);
        let pid = u64::from(r.sip);
        self.meta(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
        self.meta(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
        tid
    }

    /// One end ("s" or "f") of a flow arrow; `name` needs no JSON escaping.
    fn flow_end(
        &mut self,
        ph: &str,
        name: std::fmt::Arguments,
        id: u64,
        pid: u64,
        tid: u64,
        ts: f64,
    ) {
        self.separator();
        if self.error.is_some() {
            return;
        }
        let cat = if id & MESSAGE_FLOW != 0 {
            "message"
        } else {
            "ipcq"
        };
        let bp = if ph == "f" { ",\"bp\":\"e\"" } else { "" };
        if let Err(e) = write!(
            self.out,
            "{{\"ph\":\"{ph}\",\"name\":\"{name}\",\"cat\":\"{cat}\",\"id\":\"{id:#x}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{ts}{bp}}}"
        ) {
            self.error = Some(e);
        }
    }
}

impl TraceSink for ChromeTrace {
    fn op(&mut self, r: &OpRecord) {
        let pid = u64::from(r.sip);
        if self.named_sips.insert(r.sip) {
            self.meta(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("sip{}", r.sip)}}));
        }
        let tid = self.track(r, r.end);
        self.slice(
            format_args!("{}", r.op),
            "op",
            pid,
            tid,
            r.start,
            r.end,
            |out| {
                write!(out, "\"bytes\":{},\"params\":", r.bytes)?;
                serde_json::to_writer(out, &r.params).map_err(std::io::Error::from)
            },
        );
        if let Some(flow) = r.flow {
            // Flow ends sit inside their slices (half a tick in, or the
            // middle of a shorter one): the arrow leaves the send as it
            // starts and reaches the recv as its data is complete.
            let inset = (r.end - r.start).min(1) as f64 / 2.0;
            let (ph, at) = if r.op == "send" {
                ("s", r.start as f64 + inset)
            } else {
                ("f", r.end as f64 - inset)
            };
            let ts = self.us(at);
            self.flow_end(ph, format_args!("chunk"), flow, pid, tid, ts);
        }
    }

    fn packet(&mut self, s: &PacketSpan) {
        let l = s.link.index();
        if l >= self.used_links.len() {
            self.used_links.resize(l + 1, false);
        }
        self.used_links[l] = true;
        self.slice(
            format_args!("{} B", s.bytes),
            "link",
            LINKS_PID,
            link_tid(s.link),
            s.start,
            s.end,
            |out| write!(out, "\"msg\":{}", s.msg),
        );
        let middle = (s.start + s.end) as f64 / 2.0;
        let ends = self.in_flight.entry(s.msg).or_insert([(s.link, middle); 2]);
        ends[1] = (s.link, middle);
    }

    fn message(&mut self, a: &Arrival) {
        let Some([(l0, t0), (l1, t1)]) = self.in_flight.remove(&a.id) else {
            return; // every link of its route is ideal: no slices to join
        };
        let id = MESSAGE_FLOW | a.id.0;
        let (ts0, ts1) = (self.us(t0), self.us(t1));
        let (purpose, bytes) = (a.purpose, a.bytes);
        let name = format_args!("{purpose:?} {bytes} B");
        self.flow_end("s", name, id, LINKS_PID, link_tid(l0), ts0);
        self.flow_end("f", name, id, LINKS_PID, link_tid(l1), ts1);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
