//! Folding a symmetric collective onto a smaller machine. On a ring or torus
//! of SIPs of one kind, an algorithm whose SIPs all run the same program,
//! shifted, and send only to their grid neighbours makes every SIP do at
//! every tick what its neighbour does: the machine repeats with any period
//! that divides its sides. So the run on the smallest such torus (each side
//! cut to its least divisor of 3 or more, [`System::folded`]) takes the
//! ticks of the whole machine, with the group still the whole machine's
//! (its ring lengths, blocks and bounds), and only the first window of SIPs
//! simulated (docs/model.md §Fold).

use crate::{AlgoConfig, Group, Job, algorithms};
use kernbench_spec::spec::System;

/// The system to simulate `job` with `config` on when `sys` asks for a fold
/// (`simulation.fold`): Ok the folded system, Err why it does not apply
/// (the caller then runs the whole machine). `functional`: the run carries
/// values, which every participant must hold.
pub fn folded_for(
    sys: &System,
    config: &AlgoConfig,
    job: &Job,
    functional: bool,
) -> Result<System, String> {
    let algorithm = algorithms::find(&config.algorithm).map_err(|e| e.to_string())?;
    let folded = sys.folded()?;
    let g = Group::for_config(&folded, config);
    if !algorithm.folds(&g, job.collective) {
        return Err(format!(
            "{} ({}) does not run the same program on every SIP for {} on a {}; allowed: hier_lanes all_reduce, reduce_scatter or all_gather on a ring_1d or torus_2d, or ring's on a ring_1d",
            config.name,
            config.algorithm,
            job.collective,
            g.topology.name()
        ));
    }
    if functional {
        return Err(
            "a run that checks values (--verify) needs every participant's result; allowed: timing only".into(),
        );
    }
    let participants = g.size();
    let unit = 4 * participants;
    if !job.elems.is_multiple_of(unit) {
        return Err(format!(
            "{} B does not split into equal blocks over the {participants} participants' rings, so SIPs would move blocks of different sizes; allowed: a multiple of {} B",
            job.bytes(),
            2 * unit
        ));
    }
    Ok(folded)
}

/// The system a run of `jobs` (one collective over several sizes) with
/// `config` simulates: `sys` itself, or its fold when `sys` asks for one
/// (`simulation.fold`) and it applies to every job; the second value says
/// why an asked-for fold does not (the whole machine then runs).
pub fn simulated_system(
    sys: &System,
    config: &AlgoConfig,
    jobs: &[Job],
    functional: bool,
) -> (System, Option<String>) {
    if !sys.spec.simulation.fold {
        return (sys.clone(), None);
    }
    let mut folded = None;
    for job in jobs {
        match folded_for(sys, config, job, functional) {
            Ok(f) => folded = Some(f),
            Err(why) => return (sys.clone(), Some(why)),
        }
    }
    (folded.unwrap_or_else(|| sys.clone()), None)
}
