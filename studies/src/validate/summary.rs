//! What a validation run concludes: error statistics over the cases, the
//! Kendall τ of each (collective, system, size) group's algorithm ranking
//! in the two models, and the wall-time ratio; results.csv, kendall.csv,
//! summary.txt and the error-against-size figure.

use super::ValidateRow;
use crate::sweep::plots::{Series, chart};
use crate::sweep::study::csv_rows;
use kernbench_runtime::output::write_file;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The files `validate` writes into its `--out` besides `points/`.
pub const FILES: [&str; 4] = [
    "results.csv",
    "kendall.csv",
    "summary.txt",
    "error_vs_size.svg",
];

/// A group's best two algorithms closer than this in packet mode are a
/// near tie: the models may order them either way.
pub const DECISIVE_GAP: f64 = 0.05;

/// One (collective, topology, SIPs, cubes, bytes) group of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KendallRow {
    pub collective: String,
    pub topology: String,
    pub sips: u32,
    pub cubes: String,
    pub bytes: u64,
    pub algorithms: usize,
    /// Kendall's τ-b of the two models' orderings ([`kendall_tau`]).
    pub tau: f64,
    /// The best two algorithms differ by more than [`DECISIVE_GAP`] in
    /// packet mode.
    pub decisive: bool,
    /// Both models pick the same fastest algorithm.
    pub same_best: bool,
    /// How far apart in packet mode, in per cent of the faster, the two
    /// algorithms of the widest pair the models order differently are
    /// ([`widest_swap_pct`]; 0 when they agree on every pair).
    pub widest_swap_pct: f64,
}

/// Kendall's τ-b between two orderings of the same items: (concordant −
/// discordant pairs) / √((pairs − pairs tied in `a`)(pairs − pairs tied in
/// `b`)). Items tied alike in both count as agreeing, so two orderings with
/// the same ties give 1; a pair tied in one ordering and split in the other
/// lowers it. With every pair tied in either: 1 if tied alike, else 0.
pub fn kendall_tau(a: &[u64], b: &[u64]) -> f64 {
    let n = a.len();
    if n < 2 {
        return 1.0;
    }
    let (mut score, mut tied_a, mut tied_b) = (0i64, 0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            let x = a[i].cmp(&a[j]) as i64;
            let y = b[i].cmp(&b[j]) as i64;
            score += x * y;
            tied_a += u64::from(x == 0);
            tied_b += u64::from(y == 0);
        }
    }
    let pairs = (n * (n - 1) / 2) as u64;
    let norm = ((pairs - tied_a) as f64 * (pairs - tied_b) as f64).sqrt();
    if norm == 0.0 {
        return if tied_a == tied_b { 1.0 } else { 0.0 };
    }
    score as f64 / norm
}

/// The widest packet-mode gap, in per cent of the faster item, of a pair
/// that orderings `a` (packet) and `b` (flow) put in different order or tie
/// in one and not the other; 0 when they agree on every pair. It says
/// whether a τ below 1 is a near tie swapped or a real misranking.
pub fn widest_swap_pct(a: &[u64], b: &[u64]) -> f64 {
    let mut widest = 0.0f64;
    for i in 0..a.len() {
        for j in i + 1..a.len() {
            if a[i].cmp(&a[j]) != b[i].cmp(&b[j]) {
                let (lo, hi) = (a[i].min(a[j]), a[i].max(a[j]));
                widest = widest.max(100.0 * (hi - lo) as f64 / lo.max(1) as f64);
            }
        }
    }
    widest
}

/// The matrix rows grouped by what the algorithms compete on.
pub fn kendall_groups(rows: &[ValidateRow]) -> Vec<KendallRow> {
    let mut groups: BTreeMap<_, Vec<&ValidateRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.family == "matrix") {
        let key = (
            r.collective.clone(),
            r.topology.clone(),
            r.sips,
            r.cubes.clone(),
            r.bytes,
        );
        groups.entry(key).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|((collective, topology, sips, cubes, bytes), g)| {
            let packet: Vec<u64> = g.iter().map(|r| r.packet_ticks).collect();
            let flow: Vec<u64> = g.iter().map(|r| r.flow_ticks).collect();
            let mut sorted = packet.clone();
            sorted.sort_unstable();
            let decisive =
                sorted.len() > 1 && sorted[1] as f64 > sorted[0] as f64 * (1.0 + DECISIVE_GAP);
            let best = |t: &[u64]| (0..t.len()).min_by_key(|&i| (t[i], i));
            KendallRow {
                collective,
                topology,
                sips,
                cubes,
                bytes,
                algorithms: g.len(),
                tau: kendall_tau(&packet, &flow),
                decisive,
                same_best: best(&packet) == best(&flow),
                widest_swap_pct: widest_swap_pct(&packet, &flow),
            }
        })
        .collect()
}

/// The conclusions of a validation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub cases: usize,
    pub median_abs_error: f64,
    pub max_abs_error: f64,
    /// The case with the largest error.
    pub worst: String,
    pub within_1pct: usize,
    pub within_5pct: usize,
    pub link_bytes_identical: usize,
    pub groups: usize,
    pub decisive_groups: usize,
    /// Decisive groups whose τ is below 1, and the widest pair they order
    /// differently (per cent apart in packet mode).
    pub decisive_disagreements: usize,
    pub widest_decisive_swap_pct: f64,
    pub same_best: usize,
    /// Packet wall time over flow wall time, all cases together.
    pub speedup: f64,
}

/// The median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn summarize(rows: &[ValidateRow]) -> Summary {
    let mut errors: Vec<f64> = rows.iter().map(|r| r.rel_error.abs()).collect();
    let worst = rows
        .iter()
        .max_by(|a, b| a.rel_error.abs().total_cmp(&b.rel_error.abs()));
    let groups = kendall_groups(rows);
    let wall = |f: fn(&ValidateRow) -> f64| rows.iter().map(f).sum::<f64>();
    Summary {
        cases: rows.len(),
        max_abs_error: worst.map_or(0.0, |w| w.rel_error.abs()),
        worst: worst.map_or(String::new(), describe),
        median_abs_error: median(&mut errors),
        within_1pct: rows.iter().filter(|r| r.rel_error.abs() <= 0.01).count(),
        within_5pct: rows.iter().filter(|r| r.rel_error.abs() <= 0.05).count(),
        link_bytes_identical: rows.iter().filter(|r| r.link_bytes_identical).count(),
        groups: groups.len(),
        decisive_groups: groups.iter().filter(|g| g.decisive).count(),
        decisive_disagreements: groups.iter().filter(|g| g.decisive && g.tau < 1.0).count(),
        widest_decisive_swap_pct: groups
            .iter()
            .filter(|g| g.decisive)
            .map(|g| g.widest_swap_pct)
            .fold(0.0, f64::max),
        same_best: groups.iter().filter(|g| g.same_best).count(),
        speedup: wall(|r| r.packet_wall_ms) / wall(|r| r.flow_wall_ms).max(1e-9),
    }
}

/// A row in words, for the worst case's line.
fn describe(r: &ValidateRow) -> String {
    format!(
        "{} {} {} SIPs {} cubes {} {} {} B: packet {} ticks, flow {}",
        r.family,
        r.topology,
        r.sips,
        r.cubes,
        r.collective,
        r.algorithm,
        r.bytes,
        r.packet_ticks,
        r.flow_ticks
    )
}

impl Summary {
    /// The summary as the command prints it.
    pub fn text(&self) -> String {
        let pct = |n: usize| 100.0 * n as f64 / self.cases.max(1) as f64;
        let swaps = if self.decisive_disagreements > 0 {
            format!(
                "; the pairs they order differently are at most {:.2}% apart in packet mode",
                self.widest_decisive_swap_pct
            )
        } else {
            String::new()
        };
        format!(
            "validated {} cases, each in the packet and the flow model\n\
             |error| of flow against packet: median {:.3}%, max {:.3}% ({})\n\
             within 1%: {} ({:.1}%), within 5%: {} ({:.1}%)\n\
             per-link bytes identical: {} of {}\n\
             algorithm rankings: {} groups, {} with the best two more than {:.0}% apart in packet mode, {} of those ranked differently (Kendall tau < 1{}); same fastest algorithm in {} of {}\n\
             wall time of packet mode over flow mode: {:.2}\n",
            self.cases,
            self.median_abs_error * 100.0,
            self.max_abs_error * 100.0,
            self.worst,
            self.within_1pct,
            pct(self.within_1pct),
            self.within_5pct,
            pct(self.within_5pct),
            self.link_bytes_identical,
            self.cases,
            self.groups,
            self.decisive_groups,
            DECISIVE_GAP * 100.0,
            self.decisive_disagreements,
            swaps,
            self.same_best,
            self.groups,
            self.speedup,
        )
    }
}

/// Writes results.csv, kendall.csv and summary.txt.
pub fn write_tables(dir: &Path, rows: &[ValidateRow]) -> Result<(), String> {
    write_file(&dir.join(FILES[0]), &csv_rows(rows)?)?;
    write_file(&dir.join(FILES[1]), &csv_rows(&kendall_groups(rows))?)?;
    write_file(&dir.join(FILES[2]), summarize(rows).text().as_bytes())
}

/// Draws the largest |error| at each size, one line per case family.
pub fn write_figure(dir: &Path, rows: &[ValidateRow]) -> Result<Vec<String>, String> {
    let mut worst: BTreeMap<&str, BTreeMap<u64, f64>> = BTreeMap::new();
    for r in rows {
        let at = worst
            .entry(&r.family)
            .or_default()
            .entry(r.bytes)
            .or_default();
        *at = at.max(r.rel_error.abs() * 100.0);
    }
    let series: Series = worst
        .into_iter()
        .map(|(family, by_size)| {
            let points = by_size.into_iter().map(|(b, e)| (b as f64, e)).collect();
            (family.to_string(), points)
        })
        .collect();
    chart(
        &dir.join(FILES[3]),
        "Flow against packet model: largest |error| per size",
        "bytes (per participant, or the largest message)",
        "|flow - packet| / packet, %",
        false,
        &series,
    )?;
    Ok(vec![FILES[3].to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kendall_tau_b_counts_pairs_tied_alike_as_agreeing() {
        assert_eq!(kendall_tau(&[1, 2, 3, 4], &[10, 20, 30, 40]), 1.0);
        assert_eq!(kendall_tau(&[1, 2, 3, 4], &[40, 30, 20, 10]), -1.0);
        // One swapped pair of six: (5 − 1) / 6.
        assert_eq!(kendall_tau(&[1, 2, 3, 4], &[20, 10, 30, 40]), 4.0 / 6.0);
        // Tied alike in both: the same ordering.
        assert_eq!(kendall_tau(&[1, 1, 3], &[5, 5, 7]), 1.0);
        // Tied in one, split in the other: 2 / √(2 · 3).
        assert_eq!(kendall_tau(&[1, 1, 3], &[1, 2, 3]), 2.0 / 6f64.sqrt());
        assert_eq!(kendall_tau(&[4, 4], &[1, 1]), 1.0);
        assert_eq!(kendall_tau(&[4, 4], &[1, 2]), 0.0);
        assert_eq!(kendall_tau(&[7], &[9]), 1.0);
    }

    #[test]
    fn the_widest_swap_is_the_largest_gap_of_a_pair_ordered_differently() {
        assert_eq!(widest_swap_pct(&[100, 200, 300], &[1, 2, 3]), 0.0);
        // 100 and 101 swap (1 % apart); 100 and 200 do not.
        assert_eq!(widest_swap_pct(&[100, 101, 200], &[101, 100, 200]), 1.0);
        // Tied in flow, 10 % apart in packet mode.
        assert_eq!(widest_swap_pct(&[100, 110], &[5, 5]), 10.0);
        // Tied in packet mode, split in flow: 0 % apart.
        assert_eq!(widest_swap_pct(&[100, 100], &[1, 2]), 0.0);
        assert_eq!(widest_swap_pct(&[7], &[9]), 0.0);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
