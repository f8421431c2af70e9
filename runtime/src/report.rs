//! Reports on a run: link and memory-port utilization.

use crate::machine::Machine;
use kernbench_spec::topology::EDGE_KINDS;
use kernbench_systems::memory::MemPorts;
use kernbench_systems::program::Space;
use kernbench_systems::{LinkId, LinkStats, Tick};

/// `bytes` in GiB with two decimals, or "n/a".
pub fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".into(), |b| {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    })
}

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
            links: l.ids().map(|i| l.stats(i)).collect(),
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
            let mut busiest = (0, LinkId(0));
            let (mut sum, mut used) = (0u64, 0u64);
            for i in l.ids() {
                if kernbench_spec::topology::edge_kind(l.class_index(i)) as usize != k {
                    continue;
                }
                let busy = self.links[i.index()].busy - before.links[i.index()].busy;
                if busy > 0 {
                    sum += busy;
                    used += 1;
                }
                if busy > busiest.0 {
                    busiest = (busy, i);
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
