//! `kernbench bench`: the simulator measuring itself. Each phase — the
//! 4096-SIP build, ring traffic, the ring kernel, a ring all-reduce through
//! the collective library and through the process group — runs on its own
//! and returns the lines it reports (wall time, rates, peak memory).

use crate::command_costs;
use anyhow::Result;
use kernbench_ccl::estimate::{Budget, Cost, Estimate};
use kernbench_ccl::{CclConfig, Collective, Communicator, Job, ReduceOp};
use kernbench_runtime::kernel::wiring::{QueueConfig, ring};
use kernbench_runtime::machine::Machine;
use kernbench_runtime::report::{gib, peak_rss_bytes};
use kernbench_runtime::workload::{RingKernelArgs, RingRounds, ring_kernel};
use kernbench_spec::spec::{System, presets};
use kernbench_spec::topology::Node;
use kernbench_spec::topology::address::Space;
use kernbench_systems::PeIdx;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::QDir;
use kernbench_systems::steady::Steady;
use std::time::Instant;

/// What a bench measures: the ring, its traffic and the phases to run.
#[derive(Debug, Clone)]
pub struct Bench {
    /// SIPs on the ring (1 cube, 1 PE each).
    pub sips: u32,
    /// Rounds of ring traffic and of the ring kernel.
    pub rounds: u64,
    /// Bytes each SIP sends per round.
    pub bytes: u64,
    /// Which phases run: build, traffic, kernel, collective, process group.
    pub build: bool,
    pub traffic: bool,
    pub kernel: bool,
    pub collective: bool,
    pub process_group: bool,
    /// Buffer per participant of the all-reduce phases.
    pub collective_bytes: u64,
    /// The ring kernel's IPCQ slot size and slots per queue.
    pub slot_bytes: u64,
    pub slots: u32,
    /// The process group's budget (it builds its own machine).
    pub budget: Budget,
}

/// The ring a bench runs on: `ring_4096_lean` with `sips` SIPs.
pub fn ring_system(sips: u32) -> Result<System> {
    let mut spec = presets::preset("ring_4096_lean")?.spec;
    spec.system.sips.count = sips;
    Ok(System::from_spec(spec, "ring_4096_lean (--sips)")?)
}

/// The ring all-reduce of the collective phases.
fn all_reduce_job(bytes: u64) -> Job {
    Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: (bytes / 2) as usize,
    }
}

impl Bench {
    /// The phases asked for, in order, each with its estimate.
    pub fn cost(&self, sys: &System) -> Result<Cost> {
        let mut cost = Cost::default();
        if self.build {
            cost.add("build", Estimate::build(&presets::preset("ring_4096")?));
        }
        if self.traffic {
            cost.add(
                "traffic",
                command_costs::ring_traffic(sys, self.rounds, self.bytes),
            );
        }
        if self.kernel {
            let e = command_costs::ring_kernel(sys, self.rounds, self.bytes, self.slot_bytes);
            cost.add("kernel", e);
        }
        let ring = CclConfig::embedded_default()
            .entry("ring")
            .map_err(|(p, _)| anyhow::anyhow!(p))?
            .clone();
        let job = all_reduce_job(self.collective_bytes);
        if self.collective || self.process_group {
            Communicator::check_before_build(sys, &ring, &job).map_err(|e| {
                anyhow::anyhow!("--collective-bytes {}: {e}", self.collective_bytes)
            })?;
        }
        let all_reduce = Estimate::collective(sys, &ring, &job, false, false);
        if self.collective {
            cost.add("collective", all_reduce);
        }
        if self.process_group {
            let mut e = kernbench_dist::process_group_estimate(sys, sys.n_sips());
            e.seconds += all_reduce.seconds;
            e.peak_bytes += all_reduce.peak_bytes;
            cost.add("process group", e);
        }
        Ok(cost)
    }

    /// Runs the phase named by a part of [`Bench::cost`]; returns its report.
    pub fn phase(&self, phase: &str, sys: &System) -> Result<PhaseReport> {
        let text = |text| PhaseReport {
            text,
            per_transfer: None,
        };
        match phase {
            "build" => build().map(text),
            "traffic" => self.traffic(sys),
            "kernel" => self.kernel(sys),
            "collective" => self.collective(sys).map(text),
            _ => self.process_group(sys).map(text),
        }
    }

    /// The ring all-reduce of [`Bench::collective`] written as a distributed
    /// program: every rank allocates its buffer and joins the collective.
    fn process_group(&self, sys: &System) -> Result<String> {
        use kernbench_dist::{DPPolicy, init_process_group_within};
        let elems = (self.collective_bytes / 2) as usize;
        let t0 = Instant::now();
        let ccl = CclConfig::embedded_default();
        let mut pg =
            init_process_group_within(sys, &ccl, "ring", DataMode::TimingOnly, &self.budget)?;
        let setup = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let ticks = std::sync::Mutex::new(0);
        let n = pg.world_size;
        pg.spawn(n, |ctx| {
            let t = ctx.empty((1, elems), DPPolicy::cube_rows(1))?;
            let r = ctx.all_reduce(&t, ReduceOp::Sum)?;
            *ticks.lock().expect("no worker panicked holding it") = r.ticks;
            Ok(())
        })?;
        let secs = t0.elapsed().as_secs_f64();
        Ok(format!(
            "allreduce ring {} SIPs x {} B through the process group ({n} workers): {} ticks simulated; process group + wiring {setup:.3} s\n        {secs:.3} s wall, peak memory {}\n",
            self.sips,
            self.collective_bytes,
            ticks.into_inner().unwrap_or(0),
            gib(peak_rss_bytes())
        ))
    }

    /// A ring all-reduce through the collective library.
    fn collective(&self, sys: &System) -> Result<String> {
        let job = all_reduce_job(self.collective_bytes);
        let ccl = CclConfig::embedded_default();
        let config = ccl.entry("ring").map_err(|(p, _)| anyhow::anyhow!(p))?;
        let t0 = Instant::now();
        let mut machine = Machine::build_with(sys, DataMode::TimingOnly)?;
        let comm = Communicator::new(&mut machine, config)?;
        let setup = t0.elapsed().as_secs_f64();
        let program = comm.programs(&machine, job)?[0].1.program.len();
        let t0 = Instant::now();
        let r = comm.run(&mut machine, job)?;
        let secs = t0.elapsed().as_secs_f64();
        let skipped = machine.engine.world.resource::<Steady>();
        Ok(format!(
            "allreduce ring {} SIPs x {} B: {} ticks simulated ({:.1}% of bound); one {program}-op program shared by every participant; machine + wiring {setup:.3} s\n        {secs:.3} s wall, peak memory {}; fast-forward: {} periods ({} ticks) skipped\n",
            self.sips,
            self.collective_bytes,
            r.ticks,
            r.pct_of_bound,
            gib(peak_rss_bytes()),
            skipped.skipped_periods,
            skipped.skipped_ticks
        ))
    }

    /// Ring traffic: each SIP sends to its right neighbour, round after round.
    fn traffic(&self, sys: &System) -> Result<PhaseReport> {
        let mut m = Machine::build_with(sys, DataMode::TimingOnly)?;
        let nodes = (0..self.sips)
            .map(|s| {
                m.topology.id(Node::Pe {
                    sip: s,
                    cube: 0,
                    pe: 0,
                })
            })
            .collect();
        let work = RingRounds::new(nodes, self.bytes, self.rounds);
        let messages = work.messages();
        m.engine.set_traffic(work);
        let t0 = Instant::now();
        let r = m.engine.run().map_err(anyhow::Error::msg)?;
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(r.messages, messages, "every message is delivered");
        let text = format!(
            "ring    {} SIPs x {} rounds x {} B: {} messages, {} link traversals (packet-hops), simulated {} ticks\n        {secs:.3} s wall: {:.2} M messages/s, {:.2} M link traversals/s, {} schedule runs\n",
            self.sips,
            self.rounds,
            self.bytes,
            r.messages,
            r.hops,
            r.end_tick,
            r.messages as f64 / secs / 1e6,
            r.hops as f64 / secs / 1e6,
            r.steps
        );
        let messages = r.messages.max(1) as f64;
        Ok(PhaseReport {
            text,
            per_transfer: Some(Transfer {
                seconds: secs / messages,
                traversals: r.hops as f64 / messages,
            }),
        })
    }

    /// The same ring as a kernel: send east / recv west / add, through IPCQ
    /// queues with credits. Every round is simulated (no fast-forward): the
    /// figure is the cost of one chunk's path.
    fn kernel(&self, sys: &System) -> Result<PhaseReport> {
        let mut m = Machine::build_with(sys, DataMode::TimingOnly)?;
        m.engine.set_fast_forward(false);
        let pes: Vec<PeIdx> = (0..self.sips).map(|s| m.pe_index(s, 0, 0)).collect();
        let q = QueueConfig {
            buffer: Space::Tcm,
            n_slots: self.slots,
            slot_size: self.slot_bytes,
        };
        let t0 = Instant::now();
        let installed_at = m.install(ring(&pes, QDir::E, q).map_err(anyhow::Error::msg)?)?;
        let install_secs = t0.elapsed().as_secs_f64();
        let args = RingKernelArgs {
            rounds: self.rounds as usize,
            elems: (self.bytes / 2) as usize,
        };
        let counters = m
            .engine
            .world
            .resource::<kernbench_systems::network::NetCounters>();
        let (messages_before, hops_before) = (counters.delivered, counters.hops);
        let t0 = Instant::now();
        let r = m.launch(ring_kernel, &args, &pes)?;
        let secs = t0.elapsed().as_secs_f64();
        // The caller checked that the count fits.
        let chunks = u64::from(self.sips) * self.rounds * self.bytes.div_ceil(self.slot_bytes);
        let messages = r.messages - messages_before;
        let text = format!(
            "kernel  {} PEs x {} rounds x (send {} B / recv / add), {} slots x {} B: installed at tick {installed_at} ({install_secs:.3} s), kernels done at tick {}\n        {secs:.3} s wall: {chunks} chunk transfers ({:.2} M/s), {messages} messages with credits and launches ({:.2} M/s), {} schedule runs\n",
            self.sips,
            self.rounds,
            self.bytes,
            self.slots,
            self.slot_bytes,
            r.kernel_end,
            chunks as f64 / secs / 1e6,
            messages as f64 / secs / 1e6,
            r.steps
        );
        let per_chunk = |x: f64| x / chunks.max(1) as f64;
        Ok(PhaseReport {
            text,
            per_transfer: Some(Transfer {
                seconds: per_chunk(secs),
                traversals: per_chunk((r.hops - hops_before) as f64),
            }),
        })
    }
}

/// What a phase printed, and for the ring phases what one transfer (a
/// traffic message, a kernel chunk) cost, for their side-by-side line.
pub struct PhaseReport {
    pub text: String,
    pub per_transfer: Option<Transfer>,
}

/// The cost of one transfer of a ring phase: wall seconds and link
/// traversals (packet-hops; a chunk's include its credit's and its share of
/// the launches').
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    pub seconds: f64,
    pub traversals: f64,
}

/// The kernel ring's cost per chunk against ring traffic's per message of
/// the same size and route, split into the link traversals each makes (a
/// chunk's credit is one more packet over the route back) and the wall
/// time per traversal: what the IPCQ path (send, slot, recv, credit) adds
/// to moving the bytes.
pub fn kernel_against_traffic(traffic: Transfer, kernel: Transfer) -> String {
    let per_traversal = |t: Transfer| t.seconds * 1e9 / t.traversals.max(1.0);
    format!(
        "kernel vs traffic: {:.0} ns per chunk (send, slot, recv, credit) against {:.0} ns per raw message of the same bytes and route: {:.2}x\n  \
         link traversals (packet-hops): {:.2} per chunk (its data's and its credit's, launches spread over the chunks) against {:.2} ({:.2}x); \
         wall per traversal: {:.1} ns against {:.1} ns ({:.2}x)\n",
        kernel.seconds * 1e9,
        traffic.seconds * 1e9,
        kernel.seconds / traffic.seconds,
        kernel.traversals,
        traffic.traversals,
        kernel.traversals / traffic.traversals,
        per_traversal(kernel),
        per_traversal(traffic),
        per_traversal(kernel) / per_traversal(traffic),
    )
}

/// Building the 4096-SIP system.
fn build() -> Result<String> {
    let sys = presets::preset("ring_4096")?;
    let t0 = Instant::now();
    let m = Machine::build(&sys)?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(format!(
        "build   ring_4096: {} PEs, {} directed links in {secs:.3} s, peak memory {}\n",
        sys.total_pes(),
        m.engine.links().len(),
        gib(peak_rss_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-SIP bench of every phase but the 4096-SIP build.
    fn small() -> Bench {
        Bench {
            sips: 4,
            rounds: 2,
            bytes: 64,
            build: false,
            traffic: true,
            kernel: true,
            collective: true,
            process_group: true,
            collective_bytes: 1024,
            slot_bytes: 16384,
            slots: 2,
            budget: Budget::of_this_machine(),
        }
    }

    /// The phases run in the order `bench` reports them, and each report's
    /// simulated figures are those of
    /// `bench --sips 4 --rounds 2 --bytes 64 --no-build --collective
    /// --process-group --collective-bytes 1K`.
    #[test]
    fn phases_report_the_simulated_figures_of_a_small_ring() {
        let bench = small();
        let sys = ring_system(bench.sips).unwrap();
        let cost = bench.cost(&sys).unwrap();
        let phases: Vec<&str> = cost.parts.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(phases, ["traffic", "kernel", "collective", "process group"]);
        let expected = [
            "ring    4 SIPs x 2 rounds x 64 B: 8 messages, 40 link traversals (packet-hops), simulated 602 ticks\n",
            "kernel  4 PEs x 2 rounds x (send 64 B / recv / add), 2 slots x 16384 B: installed at tick 0 (",
            "allreduce ring 4 SIPs x 1024 B: 1821 ticks simulated (32.9% of bound); one 18-op program shared by every participant; machine + wiring ",
            "allreduce ring 4 SIPs x 1024 B through the process group (4 workers): 1821 ticks simulated; process group + wiring ",
        ];
        for (phase, start) in phases.iter().zip(expected) {
            let text = bench.phase(phase, &sys).unwrap().text;
            assert!(text.starts_with(start), "{phase}: {text}");
            assert_eq!(text.lines().count(), 2, "{phase}: {text}");
        }
        let kernel = bench.phase("kernel", &sys).unwrap().text;
        assert!(kernel.contains("kernels done at tick 704\n"), "{kernel}");
        assert!(kernel.contains(": 8 chunk transfers ("), "{kernel}");
        assert!(
            kernel.contains(", 20 messages with credits and launches ("),
            "{kernel}"
        );
    }

    /// An all-reduce buffer the ring cannot take is refused by `cost`,
    /// naming --collective-bytes, before anything is built.
    #[test]
    fn cost_refuses_a_collective_buffer_the_ring_cannot_take() {
        let bench = Bench {
            collective_bytes: 1 << 50,
            ..small()
        };
        let sys = ring_system(bench.sips).unwrap();
        let e = bench.cost(&sys).unwrap_err().to_string();
        assert!(
            e.starts_with("--collective-bytes 1125899906842624: "),
            "{e}"
        );
    }
}
