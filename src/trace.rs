//! Chrome trace-event export (open in Perfetto or chrome://tracing) of the
//! op log and the network trace, written event by event through a buffered
//! writer: memory stays at the simulator's compact records (tens of bytes
//! per event), never a JSON tree of the whole trace.
//!
//! Tracks: one process per SIP with one track per PE lane, and one "links"
//! process with a track per used link. A PE's ops are packed into lanes so
//! that no two slices on one track overlap (asynchronous sends and receives
//! overlap the PE's other ops; the trace format forbids partial overlap on a
//! track). Links serve packets one at a time, so their slices never overlap.
//! A flow arrow joins each message's first link slice to its last.

use crate::machine::Machine;
use kernbench_systems::Tick;
use kernbench_systems::exec::PENDING;
use kernbench_systems::network::NetTrace;
use kernbench_systems::oplog::OpLog;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

/// Process id of the links process.
const LINKS_PID: u64 = 1_000_000;
/// Lanes per PE a track id leaves room for.
const LANES: u64 = 64;

/// Writes events as a JSON array, one at a time.
struct Events<W: Write> {
    out: W,
    count: usize,
}

impl<W: Write> Events<W> {
    fn push(&mut self, ev: serde_json::Value) -> std::io::Result<()> {
        if self.count > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, &ev)?;
        self.count += 1;
        Ok(())
    }
}

/// Writes the trace of `m` to `path`; returns the number of events.
pub fn write_trace(m: &Machine, tick_ns: f64, path: &Path) -> Result<usize, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(io)?;
    let mut ev = Events {
        out: std::io::BufWriter::new(file),
        count: 0,
    };
    ev.out
        .write_all(b"{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n")
        .map_err(io)?;
    ops(m, tick_ns, &mut ev).map_err(io)?;
    links(m, tick_ns, &mut ev).map_err(io)?;
    ev.out.write_all(b"\n]}\n").map_err(io)?;
    ev.out.flush().map_err(io)?;
    Ok(ev.count)
}

fn us(t: Tick, tick_ns: f64) -> f64 {
    t as f64 * tick_ns / 1000.0
}

/// PE op slices, packed into lanes per PE so none overlaps another on its track.
fn ops<W: Write>(m: &Machine, tick_ns: f64, ev: &mut Events<W>) -> std::io::Result<()> {
    let log = m.engine.world.resource::<OpLog>();
    // Per (sip, cube, pe): the end tick of each lane.
    let mut lanes: BTreeMap<(u32, u32, u32), Vec<Tick>> = BTreeMap::new();
    let mut named_pid = BTreeSet::new();
    let mut order: Vec<usize> = (0..log.records.len()).collect();
    order.sort_by_key(|&i| (log.records[i].start, i));
    for i in order {
        let r = &log.records[i];
        let end = if r.end == PENDING { r.start } else { r.end };
        let pe_lanes = lanes.entry((r.sip, r.cube, r.pe)).or_default();
        let (lane, new_lane) = match pe_lanes.iter().position(|&e| e <= r.start) {
            Some(l) => (l, false),
            None => {
                pe_lanes.push(0);
                (pe_lanes.len() - 1, true)
            }
        };
        pe_lanes[lane] = end;
        let pid = r.sip as u64;
        let tid = (u64::from(r.cube) * 1000 + u64::from(r.pe)) * LANES + lane as u64;
        if named_pid.insert(pid) {
            ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("sip{}", r.sip)}}))?;
        }
        if new_lane {
            let name = format!("cube{}.pe{} #{lane}", r.cube, r.pe);
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}))?;
        }
        ev.push(json!({"ph": "X", "name": r.op, "cat": "op", "pid": pid, "tid": tid, "ts": us(r.start, tick_ns), "dur": us(end - r.start, tick_ns), "args": {"bytes": r.bytes, "params": r.params}}))?;
    }
    Ok(())
}

/// Link occupancy slices (source -> destination, edge kind) and message flows.
fn links<W: Write>(m: &Machine, tick_ns: f64, ev: &mut Events<W>) -> std::io::Result<()> {
    let trace = m.engine.world.resource::<NetTrace>();
    let table = m.engine.links();
    ev.push(
        json!({"ph": "M", "name": "process_name", "pid": LINKS_PID, "args": {"name": "links"}}),
    )?;
    // Per message: the (link, tick) of its first and of its last packet slice.
    type Ends = ((u32, Tick), (u32, Tick));
    let mut first_last: BTreeMap<u64, Ends> = BTreeMap::new();
    let mut used = BTreeSet::new();
    for &(l, start, end, msg) in &trace.spans {
        if used.insert(l) {
            let (a, b) = table.endpoints(l);
            let name = format!(
                "{} -> {} ({})",
                m.topology.node(a),
                m.topology.node(b),
                table.class(l).name
            );
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": LINKS_PID, "tid": l, "args": {"name": name}}))?;
        }
        ev.push(json!({"ph": "X", "name": format!("msg {msg}"), "cat": "link", "pid": LINKS_PID, "tid": l, "ts": us(start, tick_ns), "dur": us(end - start, tick_ns)}))?;
        let e = first_last.entry(msg).or_insert(((l, start), (l, start)));
        e.1 = (l, start);
    }
    for a in &trace.messages {
        if let Some(&((l0, t0), (l1, t1))) = first_last.get(&a.id) {
            let name = format!("{:?} {} B", a.purpose, a.bytes);
            ev.push(json!({"ph": "s", "name": name, "cat": "message", "id": a.id, "pid": LINKS_PID, "tid": l0, "ts": us(t0, tick_ns)}))?;
            ev.push(json!({"ph": "f", "bp": "e", "name": name, "cat": "message", "id": a.id, "pid": LINKS_PID, "tid": l1, "ts": us(t1, tick_ns)}))?;
        }
    }
    Ok(())
}
