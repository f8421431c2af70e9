//! Where the ranks of a DP × TP × PP run go: a rank's place on each axis
//! from its number by a stated rule (an order of the axes, innermost
//! first: TP innermost and PP outermost by default, as Megatron lays out),
//! and the `dist` groups each axis needs.

use kernbench_dist::{DistError, GroupId, ProcessGroup, WORLD};

/// One axis of the parallel layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Dp,
    Tp,
    Pp,
}

impl Axis {
    pub fn name(self) -> &'static str {
        match self {
            Axis::Dp => "dp",
            Axis::Tp => "tp",
            Axis::Pp => "pp",
        }
    }
}

/// The order of the axes over the rank numbers, innermost (consecutive
/// ranks) first: `tp-dp-pp` puts a TP group on consecutive SIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AxisOrder(pub [Axis; 3]);

/// The spellings `AxisOrder::parse` takes.
pub const AXIS_ORDERS: [&str; 6] = [
    "tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp",
];

impl Default for AxisOrder {
    fn default() -> Self {
        AxisOrder([Axis::Tp, Axis::Dp, Axis::Pp])
    }
}

impl AxisOrder {
    /// Parses `tp-dp-pp` and its permutations; `field` names the flag or
    /// plan field in the error.
    pub fn parse(field: &str, s: &str) -> Result<AxisOrder, String> {
        let axis = |n: &str| match n {
            "tp" => Some(Axis::Tp),
            "dp" => Some(Axis::Dp),
            "pp" => Some(Axis::Pp),
            _ => None,
        };
        let parts: Vec<Option<Axis>> = s.split('-').map(axis).collect();
        match parts.as_slice() {
            [Some(a), Some(b), Some(c)] if a != b && b != c && a != c => {
                Ok(AxisOrder([*a, *b, *c]))
            }
            _ => Err(format!(
                "{field} '{s}' is not a layout order; allowed: {} (the axes innermost first: tp-dp-pp puts each TP group on consecutive SIPs)",
                AXIS_ORDERS.join(", ")
            )),
        }
    }

    pub fn name(&self) -> String {
        self.0.map(Axis::name).join("-")
    }
}

/// A DP × TP × PP layout of `dp · tp · pp` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    pub dp: u32,
    pub tp: u32,
    pub pp: u32,
    pub order: AxisOrder,
}

impl Parallel {
    /// The ranks it runs on.
    pub fn world(&self) -> u32 {
        self.dp * self.tp * self.pp
    }

    fn size(&self, a: Axis) -> u32 {
        match a {
            Axis::Dp => self.dp,
            Axis::Tp => self.tp,
            Axis::Pp => self.pp,
        }
    }

    /// Checks every size is at least 1 and the product divides `sips`.
    pub fn check(&self, sips: u32) -> Result<(), String> {
        if let Some(a) = [Axis::Dp, Axis::Tp, Axis::Pp]
            .into_iter()
            .find(|&a| self.size(a) == 0)
        {
            return Err(format!(
                "{} = 0; allowed: 1 or more ranks on every axis",
                a.name()
            ));
        }
        let world = u64::from(self.dp) * u64::from(self.tp) * u64::from(self.pp);
        if world > u64::from(sips) || !u64::from(sips).is_multiple_of(world) {
            let divisors: Vec<String> = (1..=sips)
                .filter(|d| sips.is_multiple_of(*d))
                .map(|d| d.to_string())
                .collect();
            return Err(format!(
                "--dp × --tp × --pp = {} × {} × {} = {world} does not divide the {sips} SIPs (system.sips.count); allowed: a product among {}: change --dp, --tp or --pp, or use a system with a multiple of {world} SIPs",
                self.dp,
                self.tp,
                self.pp,
                divisors.join(", ")
            ));
        }
        Ok(())
    }

    /// Rank `rank`'s place on axis `a`.
    pub fn coord(&self, rank: u32, a: Axis) -> u32 {
        let mut stride = 1;
        for x in self.order.0 {
            if x == a {
                return rank / stride % self.size(a);
            }
            stride *= self.size(x);
        }
        0
    }

    /// The rank at (dp, tp, pp).
    pub fn rank_at(&self, dp: u32, tp: u32, pp: u32) -> u32 {
        let mut rank = 0;
        let mut stride = 1;
        for x in self.order.0 {
            let c = match x {
                Axis::Dp => dp,
                Axis::Tp => tp,
                Axis::Pp => pp,
            };
            rank += c * stride;
            stride *= self.size(x);
        }
        rank
    }

    /// The ranks of `rank`'s group along axis `a`, in axis order.
    pub fn group_of(&self, rank: u32, a: Axis) -> Vec<u32> {
        let at = |i| {
            let c = |x| if x == a { i } else { self.coord(rank, x) };
            self.rank_at(c(Axis::Dp), c(Axis::Tp), c(Axis::Pp))
        };
        (0..self.size(a)).map(at).collect()
    }
}

/// The groups a step's ranks run their collectives on.
#[derive(Debug, Clone)]
pub struct Groups {
    /// By rank: its TP group (None at TP 1).
    pub tp: Vec<Option<GroupId>>,
    /// By rank: its DP group (None at DP 1).
    pub dp: Vec<Option<GroupId>>,
}

/// Makes the TP and DP groups of `layout` on `pg` (before `spawn`): one
/// `dist` group per TP group and per DP group of more than one rank (the
/// world's own group when it spans every rank).
pub fn make_groups(pg: &mut ProcessGroup, layout: &Parallel) -> Result<Groups, DistError> {
    let world = layout.world();
    let mut made: Vec<(Vec<u32>, GroupId)> = Vec::new();
    let mut groups = Groups {
        tp: vec![None; world as usize],
        dp: vec![None; world as usize],
    };
    for rank in 0..world {
        for (axis, slot) in [(Axis::Tp, &mut groups.tp), (Axis::Dp, &mut groups.dp)] {
            let ranks = layout.group_of(rank, axis);
            if ranks.len() < 2 {
                continue;
            }
            let id = match made.iter().find(|(r, _)| *r == ranks) {
                Some((_, id)) => *id,
                None if ranks.len() as u32 == pg.world_size => WORLD,
                None => {
                    let id = pg.new_group(&ranks)?;
                    made.push((ranks, id));
                    id
                }
            };
            slot[rank as usize] = Some(id);
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tp_innermost_puts_tp_groups_on_consecutive_ranks() {
        let l = Parallel {
            dp: 2,
            tp: 4,
            pp: 2,
            order: AxisOrder::default(),
        };
        assert_eq!(l.group_of(5, Axis::Tp), vec![4, 5, 6, 7]);
        assert_eq!(l.group_of(5, Axis::Dp), vec![1, 5]);
        assert_eq!(l.group_of(5, Axis::Pp), vec![5, 13]);
        let pp_first = Parallel {
            order: AxisOrder::parse("order", "pp-dp-tp").unwrap(),
            ..l
        };
        assert_eq!(pp_first.group_of(0, Axis::Pp), vec![0, 1]);
        assert_eq!(pp_first.group_of(0, Axis::Tp), vec![0, 4, 8, 12]);
    }

    #[test]
    fn a_product_that_does_not_divide_names_the_fix() {
        let l = Parallel {
            dp: 3,
            tp: 2,
            pp: 1,
            order: AxisOrder::default(),
        };
        let e = l.check(16).unwrap_err();
        assert!(
            e.contains("--dp × --tp × --pp = 3 × 2 × 1 = 6 does not divide the 16 SIPs"),
            "{e}"
        );
        assert!(e.contains("allowed: a product among 1, 2, 4, 8, 16"), "{e}");
    }
}
