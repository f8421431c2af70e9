//! Reports on a run: link and memory-port utilization.

use crate::machine::Machine;
use crate::topology::EDGE_KINDS;
use kernbench_systems::memory::MemPorts;
use kernbench_systems::program::Space;
use kernbench_systems::{LinkStats, Tick};

/// Peak resident memory of this process so far (Linux), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Busy ticks of every link and memory port, to diff around a run.
#[derive(Debug, Clone)]
pub struct Usage {
    links: Vec<LinkStats>,
    ports: [Vec<Tick>; 3],
}

impl Usage {
    pub fn snapshot(m: &Machine) -> Self {
        let l = m.engine.links();
        let p = m.engine.world.resource::<MemPorts>();
        let t = &m.topology;
        let pes = t.sips as usize * t.cubes_per_sip() as usize * t.pes_per_cube as usize;
        let cubes = t.sips as usize * t.cubes_per_sip() as usize;
        let ports = [
            (0..pes).map(|i| p.busy(Space::Tcm, i as u32)).collect(),
            (0..cubes).map(|i| p.busy(Space::Sram, i as u32)).collect(),
            (0..cubes).map(|i| p.busy(Space::Hbm, i as u32)).collect(),
        ];
        Self {
            links: (0..l.len() as u32).map(|i| l.stats(i)).collect(),
            ports,
        }
    }

    /// Utilization since `before` over `ticks`: per edge kind and memory
    /// space, the busiest instance and the mean over busy ones.
    pub fn summary(&self, before: &Usage, m: &Machine, ticks: Tick) -> String {
        let l = m.engine.links();
        let ticks = ticks.max(1) as f64;
        let mut out = String::from("utilization (busy / run time): kind, busiest, mean of used\n");
        for (k, name) in EDGE_KINDS.iter().enumerate() {
            let mut busiest = (0, 0u32);
            let (mut sum, mut used) = (0u64, 0u64);
            for i in 0..l.len() {
                if l.class_index(i as u32) as usize != k {
                    continue;
                }
                let busy = self.links[i].busy - before.links[i].busy;
                if busy > 0 {
                    sum += busy;
                    used += 1;
                }
                if busy > busiest.0 {
                    busiest = (busy, i as u32);
                }
            }
            if used == 0 {
                continue;
            }
            let (a, b) = l.endpoints(busiest.1);
            out.push_str(&format!(
                "  link {name:<10} {:>5.1}% ({} -> {})  mean {:>5.1}% over {used} links\n",
                busiest.0 as f64 / ticks * 100.0,
                m.topology.node(a),
                m.topology.node(b),
                sum as f64 / used as f64 / ticks * 100.0
            ));
        }
        for (s, space) in Space::ALL.iter().enumerate() {
            let deltas: Vec<u64> = self.ports[s]
                .iter()
                .zip(&before.ports[s])
                .map(|(a, b)| a - b)
                .collect();
            let used: Vec<u64> = deltas.iter().copied().filter(|&d| d > 0).collect();
            if let Some(&max) = used.iter().max() {
                let mean = used.iter().sum::<u64>() as f64 / used.len() as f64;
                out.push_str(&format!(
                    "  port {:<10} {:>5.1}%  mean {:>5.1}% over {} ports\n",
                    space.name(),
                    max as f64 / ticks * 100.0,
                    mean / ticks * 100.0,
                    used.len()
                ));
            }
        }
        out
    }
}

/// Writes a Chrome trace-event JSON file (opens in Perfetto or
/// chrome://tracing): one track per PE with its op spans (needs the op log),
/// one track per used link with its packet occupancy, and a flow arrow per
/// message from its first link to its last (needs the network trace).
pub fn write_trace(m: &Machine, tick_ns: f64, path: &std::path::Path) -> Result<usize, String> {
    use kernbench_systems::exec::{OpLog, PENDING};
    use kernbench_systems::network::NetTrace;
    use serde_json::json;
    let us = |t: Tick| t as f64 * tick_ns / 1000.0;
    let mut ev = Vec::new();
    let links_pid = 1_000_000u64;
    ev.push(
        json!({"ph": "M", "name": "process_name", "pid": links_pid, "args": {"name": "links"}}),
    );
    let log = m.engine.world.resource::<OpLog>();
    let mut named = std::collections::BTreeSet::new();
    for r in &log.records {
        let (pid, tid) = (r.sip as u64, (r.cube * 1000 + r.pe) as u64);
        if named.insert((pid, tid)) {
            ev.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": format!("sip{}", r.sip)}}));
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": format!("cube{}.pe{}", r.cube, r.pe)}}));
        }
        let end = if r.end == PENDING { r.start } else { r.end };
        ev.push(json!({"ph": "X", "name": r.op, "cat": "op", "pid": pid, "tid": tid, "ts": us(r.start), "dur": us(end - r.start), "args": {"bytes": r.bytes, "params": r.params}}));
    }
    let trace = m.engine.world.resource::<NetTrace>();
    let links = m.engine.links();
    // Per message: the (link, tick) of its first and of its last packet span.
    type Ends = ((u32, Tick), (u32, Tick));
    let mut first_last: std::collections::BTreeMap<u64, Ends> = Default::default();
    let mut used = std::collections::BTreeSet::new();
    for &(l, start, end, msg) in &trace.spans {
        if used.insert(l) {
            let (a, b) = links.endpoints(l);
            let name = format!(
                "{} -> {} ({})",
                m.topology.node(a),
                m.topology.node(b),
                links.class(l).name
            );
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": links_pid, "tid": l, "args": {"name": name}}));
        }
        ev.push(json!({"ph": "X", "name": format!("msg {msg}"), "cat": "link", "pid": links_pid, "tid": l, "ts": us(start), "dur": us(end - start)}));
        let e = first_last.entry(msg).or_insert(((l, start), (l, start)));
        e.1 = (l, start);
    }
    for a in &trace.messages {
        if let Some(&((l0, t0), (l1, t1))) = first_last.get(&a.id) {
            let name = format!("{:?} {} B", a.purpose, a.bytes);
            ev.push(json!({"ph": "s", "name": name, "cat": "message", "id": a.id, "pid": links_pid, "tid": l0, "ts": us(t0)}));
            ev.push(json!({"ph": "f", "bp": "e", "name": name, "cat": "message", "id": a.id, "pid": links_pid, "tid": l1, "ts": us(t1)}));
        }
    }
    let n = ev.len();
    let doc = json!({"traceEvents": ev, "displayTimeUnit": "ns"});
    let bytes = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(n)
}
