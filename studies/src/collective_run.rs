//! `kernbench run`: one collective over a size range, nccl-tests style —
//! one ccl entry, `auto` (each size's autotuned pick) or `all` (every entry
//! that supports the collective, then the best per size). Tables go to the
//! caller's writer line by line as sizes finish; [`crate::nccl_table`]
//! formats them.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};

use crate::nccl_table::{self, Record};
use crate::run_progress::SizeProgress;
use kernbench_ccl::estimate::{Budget, Estimate, NetworkChoice, TRACE_FILE_BYTES_PER_EVENT};
use kernbench_ccl::{AUTO, AlgoConfig, CclConfig, Collective, Communicator, Group, Job, Placement};
use kernbench_ccl::{ReduceOp, algorithms};
use kernbench_runtime::machine::Machine;
use kernbench_runtime::message_log::MessageLog;
use kernbench_runtime::report::Usage;
use kernbench_spec::spec::System;
use kernbench_systems::memory::DataMode;
use kernbench_systems::network::{NetCounters, NetworkModel};
use kernbench_systems::steady::Steady;

/// Knobs that shrink a collective run, the ones that help most first.
pub const RUN_KNOBS: &str = "larger packet_bytes (links.*) or slot_size, fewer chunks, a smaller size, fewer SIPs or cubes, no --trace/--verify";

/// [`RUN_KNOBS`] with `run`'s size flag.
fn cli_knobs() -> String {
    RUN_KNOBS.replace("a smaller size", "a smaller -e/--max-bytes")
}

/// What a run asks for (the flags of `kernbench run`).
#[derive(Debug, Clone)]
pub struct SizeRun {
    pub collective: Collective,
    pub op: ReduceOp,
    /// An entry of the ccl config, `auto` or `all`.
    pub algorithm: String,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Size multiplier from one line to the next (2 or more).
    pub step_factor: u64,
    /// Carry f16 values and count wrong result elements.
    pub verify: bool,
    /// Write a Chrome trace here (one entry only).
    pub trace: Option<PathBuf>,
    /// Write every delivered message here as CSV (one entry only, not
    /// with `trace`).
    pub messages: Option<PathBuf>,
    /// Stop a run whose clock passes this tick.
    pub max_ticks: Option<u64>,
    pub budget: Budget,
    /// Under `auto`: where decisions are cached, and whether to ignore them.
    pub autotune_cache: PathBuf,
    pub retune: bool,
    /// The network model: the spec's, a fixed one, or `auto` per entry
    /// (decided on the largest size, which sets the machine's cost).
    pub network: NetworkChoice,
}

impl SizeRun {
    /// The flag of the recorder asked for (`--trace` or `--messages`; a
    /// run takes one), if any.
    fn recorder(&self) -> Option<&'static str> {
        [("--trace", &self.trace), ("--messages", &self.messages)]
            .into_iter()
            .find_map(|(flag, path)| path.as_ref().map(|_| flag))
    }

    /// The sizes: `min_bytes`, then times `step_factor` up to `max_bytes`.
    pub fn sizes(&self) -> Vec<u64> {
        std::iter::successors(Some(self.min_bytes), |&b| {
            b.checked_mul(self.step_factor)
                .filter(|&n| n <= self.max_bytes)
        })
        .collect()
    }

    /// Runs what `algorithm` names on `sys`, writing the tables to `out`;
    /// every record.
    pub fn run(&self, sys: &System, ccl: &CclConfig, out: &mut dyn Write) -> Result<Vec<Record>> {
        if self.trace.is_some() && self.messages.is_some() {
            bail!(
                "--messages with --trace: a run takes one recorder; allowed: one of them, or the run twice (both models are deterministic)"
            );
        }
        if self.algorithm == "all" {
            return self.all_entries(sys, ccl, out);
        }
        let config = ccl.entry(&self.algorithm).map_err(|(problem, allowed)| {
            anyhow!("--algorithm: {problem}; allowed: {allowed}, or all")
        })?;
        if config.algorithm == AUTO {
            self.auto(sys, ccl, out)
        } else {
            self.entry(sys, config, out)
        }
    }

    fn job(&self, bytes: u64) -> Job {
        Job {
            collective: self.collective,
            op: self.op,
            elems: (bytes / 2) as usize,
        }
    }

    /// One entry over the size range: header, one line per size with both
    /// placements, footer, utilization, trace; its records.
    fn entry(&self, sys: &System, config: &AlgoConfig, out: &mut dyn Write) -> Result<Vec<Record>> {
        let (mut machine, comm) = self.machine(sys, config, (self.min_bytes, self.max_bytes))?;
        let mut network = self.network_line(Some(machine.engine.network_model()), sys);
        if let Some(fold) = self.fold_line(sys, config, &machine.system) {
            network = format!("{network}\n{fold}");
        }
        write!(
            out,
            "{}",
            self.header(sys, &comm.group, &config.name, &ccl_line(config), &network)
        )?;
        let sizes = self.sizes();
        let (mut records, mut last) = (Vec::new(), None);
        for (k, &bytes) in sizes.iter().enumerate() {
            let (pair, usage) = self.size(&mut machine, &comm, bytes, (k, sizes.len()))?;
            writeln!(out, "{}", nccl_table::line(&pair[0], &pair[1]))?;
            records.extend(pair);
            last = Some(usage);
        }
        write!(out, "{}", nccl_table::footer(&records))?;
        write_usage(out, &machine, last)?;
        if let Some(path) = &self.trace {
            let n = finish_trace(&mut machine)?;
            writeln!(
                out,
                "wrote {} ({n} trace events; peak memory of this run {})",
                path.display(),
                kernbench_runtime::report::gib(kernbench_runtime::report::peak_rss_bytes())
            )?;
        }
        if let Some(path) = &self.messages {
            let n = finish_message_log(&mut machine)?;
            writeln!(out, "wrote {} ({n} messages)", path.display())?;
        }
        Ok(records)
    }

    /// `auto`: per size, the tuner's pick (from the cache when it holds it)
    /// runs on a machine of its own, built when first picked; one table,
    /// each line naming its pick.
    fn auto(&self, sys: &System, ccl: &CclConfig, out: &mut dyn Write) -> Result<Vec<Record>> {
        if let Some(flag) = self.recorder() {
            bail!(
                "{flag} with --algorithm auto: each pick runs on its own machine and a record follows one; allowed: --algorithm NAME with the pick of the size to record (kernbench autotune --sizes SIZE shows it)"
            );
        }
        let tuner = crate::autotune::Tuner::new(sys, ccl);
        self.tuning_within_budget(sys, &tuner)?;
        let mut tuner = tuner.with_cache(&self.autotune_cache, self.retune);
        let line = format!(
            "# ccl: auto: per size, the fastest of {} autotune candidates of {} (decisions cached in {}{}); the pick ends each line",
            tuner.candidates().len(),
            ccl.origin,
            self.autotune_cache.display(),
            if self.retune { ", --retune" } else { "" }
        );
        let network = self.network_line(None, sys);
        write!(
            out,
            "{}",
            self.header(sys, &Group::new(sys), AUTO, &line, &network)
        )?;
        let sizes = self.sizes();
        let mut machines: Vec<(String, Machine, Communicator)> = Vec::new();
        let (mut records, mut last) = (Vec::new(), None);
        for (k, &bytes) in sizes.iter().enumerate() {
            let d = tuner.decide(self.collective, bytes)?;
            let config = tuner.config(&d).clone();
            let at = match machines.iter().position(|m| m.0 == config.name) {
                Some(i) => i,
                None => {
                    let (m, c) = self.machine(sys, &config, (bytes, bytes))?;
                    machines.push((config.name.clone(), m, c));
                    machines.len() - 1
                }
            };
            let (_, machine, comm) = &mut machines[at];
            let (mut pair, usage) = self.size(machine, comm, bytes, (k, sizes.len()))?;
            for r in &mut pair {
                r.entry = AUTO.into();
                r.autotuned = Some(config.name.clone());
            }
            writeln!(out, "{}", nccl_table::line(&pair[0], &pair[1]))?;
            records.extend(pair);
            last = Some((at, usage));
        }
        write!(out, "{}", nccl_table::footer(&records))?;
        for why in &tuner.rebuilt {
            eprintln!("note: rebuilt a cached decision: {why}");
        }
        if let Some((at, usage)) = last {
            write_usage(out, &machines[at].1, Some(usage))?;
        }
        Ok(records)
    }

    /// `all`: every entry that supports the collective here, one table
    /// each, then the best per size; the records of every entry.
    fn all_entries(
        &self,
        sys: &System,
        ccl: &CclConfig,
        out: &mut dyn Write,
    ) -> Result<Vec<Record>> {
        if let Some(flag) = self.recorder() {
            bail!(
                "{flag} with --algorithm all: a record follows one algorithm; allowed: --algorithm NAME"
            );
        }
        let topology = sys.spec.system.sips.topology;
        let mut runnable = Vec::new();
        for config in &ccl.entries {
            let algorithm = algorithms::find(&config.algorithm)?;
            if algorithm.collectives().contains(&self.collective)
                && algorithm.topologies().contains(&topology)
            {
                runnable.push(config);
            }
        }
        self.all_within_budget(sys, &runnable)?;
        let (mut tables, mut refused) = (Vec::new(), Vec::new());
        for config in runnable {
            // One entry refused (too large, too slow) does not end the comparison.
            match self.entry(sys, config, out) {
                Ok(rows) => tables.push((config.name.clone(), rows)),
                Err(e) => {
                    writeln!(out, "# {}: skipped: {e:#}", config.name)?;
                    refused.push(format!("{}: {e:#}", config.name));
                }
            }
            writeln!(out)?;
        }
        if tables.is_empty() && !refused.is_empty() {
            bail!(
                "--algorithm all: every entry that runs {} here was refused before it ran ({}); allowed: what each entry's message allows, or --algorithm NAME for one entry",
                self.collective,
                refused.join("; ")
            );
        }
        write!(out, "{}", best_per_size(&tables))?;
        Ok(tables.into_iter().flat_map(|t| t.1).collect())
    }

    /// `auto`'s tuning (every candidate at each size's bucket its cache
    /// lacks) within the budget, before anything is simulated.
    fn tuning_within_budget(&self, sys: &System, tuner: &crate::autotune::Tuner) -> Result<()> {
        let cache = (self.autotune_cache.as_path(), self.retune);
        let sizes = self.sizes();
        let to_tune =
            crate::command_costs::buckets_to_tune(sys, tuner, cache, self.collective, &sizes);
        crate::command_costs::autotune(sys, tuner.candidates(), self.collective, &to_tune)
            .check(
                "--algorithm auto's tuning",
                &self.budget,
                "fewer or smaller sizes (-b/--min-bytes, -e/--max-bytes), fewer candidates (autotune.configs of --ccl), --algorithm NAME, or a smaller system",
            )
            .map_err(|e| anyhow!("{}: {e}", sys.origin))
    }

    /// `all`'s entries together within the time budget (each entry alone is
    /// checked when it starts; one over budget alone is skipped, and when
    /// every one is, `all` says so with each estimate).
    fn all_within_budget(&self, sys: &System, entries: &[&AlgoConfig]) -> Result<()> {
        let mut cost = kernbench_ccl::estimate::Cost::default();
        for config in entries {
            let job = self.job(self.max_bytes);
            if Communicator::check_before_build(sys, config, &job).is_err() {
                continue;
            }
            let e = Estimate::collective(sys, config, &job, self.verify, false);
            if e.check(&self.budget, RUN_KNOBS).is_ok() {
                cost.add(format!("{} at {} B", config.name, self.max_bytes), e);
            }
        }
        cost.check(
            "--algorithm all",
            &self.budget,
            &format!("--algorithm NAME (one entry), {}", cli_knobs()),
        )
        .map_err(|e| anyhow!("{}: {e}", sys.origin))
    }

    /// One size, both placements, on `comm`: the two records and the usage
    /// snapshot taken before the in-place run with its time.
    fn size(
        &self,
        machine: &mut Machine,
        comm: &Communicator,
        bytes: u64,
        (k, of): (usize, usize),
    ) -> Result<(Vec<Record>, (Usage, u64))> {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        if tty {
            eprint!("\r# simulating {bytes} B ({}/{of}) ...", k + 1);
        }
        let job = self.job(bytes);
        let estimate = Estimate::collective(
            &machine.system,
            &comm.config,
            &job,
            self.verify,
            self.trace.is_some(),
        )
        .seconds;
        let (mut pair, mut last) = (Vec::new(), None);
        for placement in Placement::ALL {
            let before = Usage::snapshot(machine);
            let progress = SizeProgress {
                bytes,
                k,
                of,
                placement: placement.name(),
                estimate,
                tick_ns: machine.system.spec.system.tick_ns,
            };
            let delivered = machine.engine.world.resource::<NetCounters>().delivered;
            machine.engine.set_watch(progress.watch(tty, delivered));
            let run = comm.run_placed(machine, job, placement);
            machine.engine.set_watch(None);
            let r = run?;
            let wrong = self
                .verify
                .then(|| comm.wrong_elements(machine, &job, comm.result_base(&job, placement)));
            last = Some((before, r.ticks));
            let mut record = Record::new(
                &r,
                &comm.config.name,
                &comm.config.algorithm,
                placement,
                wrong,
            );
            record.network_model = machine.engine.network_model().name().into();
            record.simulated_sips = machine.system.n_sips();
            pair.push(record);
        }
        if tty {
            eprint!("\r\x1b[K");
        }
        Ok((pair, last.expect("two placements ran")))
    }

    /// Checks, estimates and builds one entry's machine and communicator
    /// for sizes `min_bytes..=max_bytes` (with the trace sink and run
    /// limits installed).
    fn machine(
        &self,
        sys: &System,
        config: &AlgoConfig,
        (min_bytes, max_bytes): (u64, u64),
    ) -> Result<(Machine, Communicator)> {
        for (flag, bytes) in [("-b/--min-bytes", min_bytes), ("-e/--max-bytes", max_bytes)] {
            Communicator::check_before_build(sys, config, &self.job(bytes))
                .map_err(|e| anyhow!("{flag} {bytes}: {e}"))?;
        }
        let asked = sys;
        let (mut sys, unfolded) = self.simulated_system(sys, config, (min_bytes, max_bytes));
        self.network
            .apply(&mut sys, config, &self.job(max_bytes), self.verify);
        let sys = &sys;
        let est = Estimate::collective(
            sys,
            config,
            &self.job(max_bytes),
            self.verify,
            self.trace.is_some(),
        );
        if est.check(&self.budget, &cli_knobs()).is_err() {
            // Refused: the message names what would fit, the fold included.
            let knobs = cli_knobs() + &self.fold_hint(asked, config, (min_bytes, max_bytes));
            let e = est.check(&self.budget, &knobs).unwrap_err();
            return Err(match &unfolded {
                Some(why) => anyhow!("{}: {e} (--fold does not apply: {why})", sys.origin),
                None => anyhow!("{}: {e}", sys.origin),
            });
        }
        let mode = if self.verify {
            DataMode::Functional
        } else {
            DataMode::TimingOnly
        };
        let mut machine = Machine::build_with(sys, mode)?;
        let comm = Communicator::new(&mut machine, config)?;
        for (flag, bytes) in [("-b/--min-bytes", min_bytes), ("-e/--max-bytes", max_bytes)] {
            comm.check_out_of_place(&machine, &self.job(bytes))
                .map_err(|e| anyhow!("{flag} {bytes}: {e}"))?;
        }
        if let Some(path) = &self.trace {
            let sink = kernbench_runtime::trace::ChromeTrace::create(path, sys.spec.system.tick_ns)
                .map_err(anyhow::Error::msg)?;
            machine.trace_to(Box::new(sink));
        }
        if let Some(path) = &self.messages {
            let topology = machine.topology.clone();
            let sink = MessageLog::create(path, topology, sys.spec.system.tick_ns)
                .map_err(anyhow::Error::msg)?;
            machine.trace_to(Box::new(sink));
        }
        let trace_file = est.trace_events * TRACE_FILE_BYTES_PER_EVENT;
        if trace_file > 1e9 {
            eprintln!(
                "note: the trace file is estimated at {:.1} GB ({:.3e} events); narrow it with one size (--min-bytes = --max-bytes), a smaller size or fewer SIPs",
                trace_file / 1e9,
                est.trace_events
            );
        }
        if est.seconds > 60.0 {
            eprintln!(
                "note: the largest size is estimated to take about {:.0} s to simulate per placement ({:.3e} messages)",
                est.seconds, est.messages
            );
        }
        machine
            .engine
            .world
            .insert_resource(kernbench_systems::RunLimits {
                max_ticks: self.max_ticks,
                ..Default::default()
            });
        Ok((machine, comm))
    }

    /// The system the runs of `config` over the sizes `min..=max` simulate,
    /// and why an asked-for fold does not apply ([`kernbench_ccl::fold`]).
    fn simulated_system(
        &self,
        sys: &System,
        config: &AlgoConfig,
        (min_bytes, max_bytes): (u64, u64),
    ) -> (System, Option<String>) {
        let jobs = [self.job(min_bytes), self.job(max_bytes)];
        kernbench_ccl::fold::simulated_system(sys, config, &jobs, self.verify)
    }

    /// For a refusal's list of what would fit: `--fold` with its estimate,
    /// when it was not asked for and would apply; else nothing.
    fn fold_hint(&self, sys: &System, config: &AlgoConfig, range: (u64, u64)) -> String {
        if sys.spec.simulation.fold {
            return String::new();
        }
        let mut asked = sys.clone();
        asked.spec.simulation.fold = true;
        let (mut folded, unfolded) = self.simulated_system(&asked, config, range);
        if unfolded.is_some() {
            return String::new();
        }
        let job = self.job(range.1);
        self.network.apply(&mut folded, config, &job, self.verify);
        let est = Estimate::collective(&folded, config, &job, self.verify, self.trace.is_some());
        format!(
            ", --fold (every SIP runs the same program, shifted: {} SIPs simulated for the same ticks; docs/model.md §Fold), estimated at {:.0} s",
            folded.n_sips(),
            est.seconds
        )
    }

    /// The header's fold line: what the machine simulated stands for, or
    /// why a fold asked for does not apply; None without a fold.
    fn fold_line(&self, sys: &System, config: &AlgoConfig, built: &System) -> Option<String> {
        if built.fold != (1, 1) {
            return Some(format!(
                "# fold: {} SIPs simulated ({}x{}), each standing for {}x{} (every SIP runs the same program, shifted: the same ticks as the whole machine; docs/model.md §Fold)",
                built.n_sips(),
                built.sip_grid.0,
                built.sip_grid.1,
                built.fold.0,
                built.fold.1
            ));
        }
        let (_, unfolded) = self.simulated_system(sys, config, (self.min_bytes, self.max_bytes));
        unfolded.map(|why| format!("# fold: not applied, the whole machine runs: {why}"))
    }

    /// The parameter lines above the table of entry `name`: what ran, on
    /// what, and why there are no iteration counts; then the column header.
    /// The header's network line: the model that moves the bytes (`built`:
    /// the machine's, once there is one) and how it was chosen.
    fn network_line(&self, built: Option<NetworkModel>, sys: &System) -> String {
        let what = |m: NetworkModel| match m {
            NetworkModel::Packet => "packet (store-and-forward packets, exact)",
            NetworkModel::Flow => {
                "flow (a flow per leg of a message's route, first come first served by turn; docs/model.md §Flow-level network)"
            }
        };
        match (self.network, built) {
            (NetworkChoice::Auto(_), Some(m)) => format!(
                "# network: {} (--network auto: chosen on the largest size's estimate)",
                what(m)
            ),
            (NetworkChoice::Auto(_), None) => "# network: auto (per pick: packet where its estimate fits the budget, flow otherwise; the CSV's network_model says which)".into(),
            (NetworkChoice::Fixed(m), _) => format!("# network: {}", what(built.unwrap_or(m))),
            (NetworkChoice::Spec, _) => {
                format!("# network: {}", what(built.unwrap_or(sys.spec.network.model)))
            }
        }
    }

    fn header(&self, sys: &System, group: &Group, name: &str, ccl: &str, network: &str) -> String {
        let s = &sys.spec;
        let l = &s.links.inter_sip;
        let who = if group.pes == 1 {
            "pe0 of every cube"
        } else {
            "every PE of every cube"
        };
        let check = if self.verify {
            "on (-c 1: #wrong counts wrong result elements)"
        } else {
            "off (timing only; -c 1 checks)"
        };
        format!(
            "# {} / {}, op {}\n\
             # system: {}: {}, tick {} ns, inter-SIP links {} GB/s {} ns {} B packets\n\
             {network}\n\
             {ccl}\n\
             # participants: {} ({who})\n\
             # sizes: {} to {} B, x{} per line; check {check}\n\
             # one run per size and placement, no warmup or iterations: the simulator is deterministic\n\
             # out-of-place: the collective, then a simulated copy of the result into a separate buffer (docs/model.md)\n#\n{}",
            self.collective,
            name,
            self.op.name(),
            sys.origin,
            crate::catalog::shape(sys),
            s.system.tick_ns,
            l.bandwidth_gbps,
            l.latency_ns,
            l.packet_bytes,
            group.size(),
            self.min_bytes,
            self.max_bytes,
            self.step_factor,
            nccl_table::column_header(),
        )
    }
}

/// Ends the `--trace` file: the sink writes its closing events; how many
/// events the file holds.
fn finish_trace(machine: &mut Machine) -> Result<u64> {
    let sink = take_sink::<kernbench_runtime::trace::ChromeTrace>(machine, "--trace")?;
    sink.finish(machine).map_err(anyhow::Error::msg)
}

/// Ends the `--messages` file; how many rows it holds.
fn finish_message_log(machine: &mut Machine) -> Result<u64> {
    let sink = take_sink::<MessageLog>(machine, "--messages")?;
    sink.finish().map_err(anyhow::Error::msg)
}

/// The recorder `flag` installed on `machine`, taken off it.
fn take_sink<T: 'static>(machine: &mut Machine, flag: &str) -> Result<Box<T>> {
    machine
        .take_trace()
        .and_then(|s| s.into_any().downcast::<T>().ok())
        .ok_or_else(|| anyhow!("{flag}: its recorder was not installed"))
}

/// The header's ccl line of one entry.
fn ccl_line(config: &AlgoConfig) -> String {
    format!(
        "# ccl: {} (algorithm {}): buffer {}, {} slots x {} B, chunks {}",
        config.name,
        config.algorithm,
        config.buffer_kind.name(),
        config.n_slots,
        config.slot_size,
        config.chunks
    )
}

/// The link and memory-port utilization of the largest size's in-place
/// run, and what the fast-forward skipped over the table's runs.
fn write_usage(out: &mut dyn Write, machine: &Machine, last: Option<(Usage, u64)>) -> Result<()> {
    if let Some((before, ticks)) = last {
        write!(
            out,
            "\nlargest size in place, {}",
            Usage::snapshot(machine).summary(&before, machine, ticks)
        )?;
    }
    let skipped = machine.engine.world.resource::<Steady>();
    if skipped.skipped_periods > 0 {
        writeln!(
            out,
            "fast-forward: {} repeating periods ({} ticks) skipped over these runs, exactly (docs/model.md §Fast-forward)",
            skipped.skipped_periods, skipped.skipped_ticks
        )?;
    }
    Ok(())
}

/// The best entry per size (shortest in-place time) and how far the others are.
fn best_per_size(tables: &[(String, Vec<Record>)]) -> String {
    use std::fmt::Write as _;
    let in_place = |rows: &[Record]| -> Vec<Record> {
        rows.iter()
            .filter(|r| r.placement == Placement::InPlace.name())
            .cloned()
            .collect()
    };
    let tables: Vec<(&str, Vec<Record>)> = tables
        .iter()
        .map(|(name, rows)| (name.as_str(), in_place(rows)))
        .collect();
    let Some((_, first)) = tables.first() else {
        return "# no entry of the ccl config supports this collective on this system\n".into();
    };
    let mut s = format!("# best per size (of {} entries)\n", tables.len());
    let _ = writeln!(
        s,
        "{:>12} {:>18} {:>12} {:>11} {:>8}  then",
        "size(B)", "best", "time(us)", "busbw(GB/s)", "%bound"
    );
    for (k, row) in first.iter().enumerate() {
        let mut at: Vec<(&str, &Record)> = tables
            .iter()
            .filter_map(|(name, rows)| rows.get(k).map(|r| (*name, r)))
            .collect();
        at.sort_by_key(|(name, r)| (r.ticks, *name));
        let (best, r) = at[0];
        let then: Vec<String> = at[1..]
            .iter()
            .map(|(name, o)| format!("{name} {:.2}x", o.ticks as f64 / r.ticks.max(1) as f64))
            .collect();
        let _ = writeln!(
            s,
            "{:>12} {:>18} {:>12.3} {:>11.2} {:>8.1}  {}",
            row.bytes,
            best,
            r.time_us,
            r.busbw_gbps,
            r.pct_of_bound,
            then.join(", ")
        );
    }
    s
}
