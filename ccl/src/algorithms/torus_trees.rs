//! `torus_trees`: broadcast over arc-disjoint spanning trees of the SIP
//! grid, one per direction the root can send in (four on a torus, two from
//! a mesh's corner), each carrying its share of the buffer, pipelined in
//! pieces. Every link carries at most one tree one way, so each carries
//! `S/4` (`S/2` on a mesh), and no tree is deeper than `w + h` hops (a
//! chain round a Hamiltonian cycle is `wh − 1`): on 256 SIPs the fill is
//! about 31 hops instead of 255.
//!
//! Tree `E`, in coordinates relative to the root: east along the root's
//! row; from each other node of that row, north up its column; the root's
//! column is reached from its west neighbours by the east arcs
//! `(w−1, y) → (0, y)`. Trees `N`, `W` and `S` are the same turned by a
//! quarter, a half and three quarters (east → north → west → south). Tree
//! `E` uses east arcs of the root's row and of column `w−1`'s wrap, and the
//! north arcs of columns `1..w` but their wrap into row 0; tree `N` uses the
//! north arcs of column 0 and exactly those wraps, and west arcs of rows
//! `1..h` but the ones into column 0, which tree `W` uses: each arc is in
//! one tree (`a_torus_has_four_arc_disjoint_spanning_trees`). A mesh has no
//! wrap: its tree `E` reaches column 0 by the west arcs `(1, y) → (0, y)`,
//! and its tree `N` is tree `E` mirrored across the diagonal.

use super::primitives::me;
use crate::cost::CostTerms;
use crate::kernels::{Buffer, Chain, ChainKind, run_chains};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::spec::SipTopology;
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct TorusTrees;

/// The four compass directions, in tree order (each a quarter turn left of
/// the one before).
const DIRS: [QDir; 4] = [QDir::E, QDir::N, QDir::W, QDir::S];

/// One node's place in one tree: the direction its pieces come from (None
/// at the root), the directions it forwards them to, and its depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreePosition {
    pub from: Option<QDir>,
    pub to: Vec<QDir>,
    pub depth: usize,
}

/// `(x, y)` turned a quarter right `turns` times in a `w × h` grid whose
/// sides turn with it.
fn turn(x: usize, y: usize, w: usize, h: usize, turns: usize) -> (usize, usize, usize, usize) {
    let (mut x, mut y, mut w, mut h) = (x, y, w, h);
    for _ in 0..turns {
        // A quarter right: north becomes east, so the new x runs along the
        // old y and the new y against the old x.
        (x, y, w, h) = (y, (w - x) % w, h, w);
    }
    (x, y, w, h)
}

/// Node `(x, y)` (relative to the root) in tree `t` (0..4: E, N, W, S) of a
/// `w × h` torus. Tree `t` is tree E on the grid turned `t` quarters right,
/// where its east is `DIRS[t]` and its north `DIRS[t + 1]`.
pub fn place(t: usize, x: usize, y: usize, w: usize, h: usize) -> TreePosition {
    // Turn the node into tree E's frame: a quarter right per tree.
    let (x, y, w, h) = turn(x, y, w, h, t);
    let (east, north) = (DIRS[t], DIRS[(t + 1) % 4]);
    let (west, south) = (DIRS[(t + 2) % 4], DIRS[(t + 3) % 4]);
    match (x, y) {
        (0, 0) => TreePosition {
            from: None,
            to: vec![east],
            depth: 0,
        },
        (x, 0) => {
            let mut to = Vec::new();
            if x + 1 < w {
                to.push(east);
            }
            to.push(north);
            TreePosition {
                from: Some(west),
                to,
                depth: x,
            }
        }
        (0, y) => TreePosition {
            from: Some(west),
            to: Vec::new(),
            depth: w + y,
        },
        (x, y) => {
            let mut to = Vec::new();
            if y + 1 < h {
                to.push(north);
            }
            if x + 1 == w {
                to.push(east);
            }
            TreePosition {
                from: Some(south),
                to,
                depth: x + y,
            }
        }
    }
}

/// Node `(x, y)` in tree `t` (0: E, 1: N) of a `w × h` mesh without
/// wrap-around, rooted at the corner (0, 0): tree E runs east along row 0,
/// north up every other column, and reaches column 0 by the west arcs
/// `(1, y) → (0, y)`; tree N is its mirror across the diagonal (north up
/// column 0, east along every other row, row 0 by the south arcs
/// `(x, 1) → (x, 0)`).
pub fn mesh_place(t: usize, x: usize, y: usize, w: usize, h: usize) -> TreePosition {
    let (x, y, w, h) = if t == 0 { (x, y, w, h) } else { (y, x, h, w) };
    let d = |e: QDir| if t == 0 { e } else { mirror(e) };
    let (east, north, west, south) = (d(QDir::E), d(QDir::N), d(QDir::W), d(QDir::S));
    let place = |from, to: Vec<QDir>, depth| TreePosition { from, to, depth };
    match (x, y) {
        (0, 0) => place(None, vec![east], 0),
        (x, 0) => {
            let mut to = Vec::new();
            if x + 1 < w {
                to.push(east);
            }
            to.push(north);
            place(Some(west), to, x)
        }
        (0, y) => place(Some(east), Vec::new(), y + 2),
        (x, y) => {
            let mut to = Vec::new();
            if y + 1 < h {
                to.push(north);
            }
            if x == 1 {
                to.push(west);
            }
            place(Some(south), to, x + y)
        }
    }
}

/// A direction mirrored across the diagonal (east ↔ north, west ↔ south).
fn mirror(d: QDir) -> QDir {
    match d {
        QDir::E => QDir::N,
        QDir::N => QDir::E,
        QDir::W => QDir::S,
        _ => QDir::W,
    }
}

/// The trees of the group's grid: four on a torus, two on a mesh.
fn trees(g: &Group) -> usize {
    if g.topology == SipTopology::Torus2d {
        4
    } else {
        2
    }
}

/// Node `(x, y)` in tree `t` of the group's grid.
fn place_in(g: &Group, t: usize, x: usize, y: usize) -> TreePosition {
    let (w, h) = grid(g);
    if g.topology == SipTopology::Torus2d {
        place(t, x, y, w, h)
    } else {
        mesh_place(t, x, y, w, h)
    }
}

/// The group's grid side lengths; the root is participant 0 at (0, 0).
fn grid(g: &Group) -> (usize, usize) {
    (g.grid.0 as usize, g.grid.1 as usize)
}

/// The node one hop from `(x, y)` in direction `d` of a `w × h` torus,
/// and whether that hop wraps round (a link a mesh does not have).
fn step(x: usize, y: usize, w: usize, h: usize, d: QDir) -> ((usize, usize), bool) {
    match d {
        QDir::E => (((x + 1) % w, y), x + 1 == w),
        QDir::W => (((x + w - 1) % w, y), x == 0),
        QDir::N => ((x, (y + 1) % h), y + 1 == h),
        _ => ((x, (y + h - 1) % h), y == 0),
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let (n, elems) = (a.group.size(), a.job.elems);
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let (w, h) = grid(&a.group);
    let trees = trees(&a.group);
    let pieces = a.crossing_pieces(elems / trees, w + h);
    let buf = Buffer::new(a.buffer(tl), elems, &[trees, pieces]);
    let at = |hops| a.chain_offset(elems / (trees * pieces), hops);
    let chains: Vec<Chain> = (0..trees)
        .map(|t| {
            let TreePosition { from, to, depth } = place_in(&a.group, t, p % w, p / w);
            let mut to = to.into_iter();
            let next = to.next();
            Chain {
                branches: to.collect(),
                ..Chain::whole(vec![t.into()], from, next, at(depth), pieces)
            }
        })
        .collect();
    run_chains(tl, &buf, ChainKind::Broadcast, &chains, pieces);
}

impl Algorithm for TorusTrees {
    fn name(&self) -> &'static str {
        "torus_trees"
    }
    fn summary(&self) -> &'static str {
        "broadcast over arc-disjoint spanning trees of a torus (four) or a mesh (two from the corner), one participant per SIP, at most w + h hops deep"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[Collective::Broadcast]
    }
    fn topologies(&self) -> &'static [SipTopology] {
        &[SipTopology::Torus2d, SipTopology::Mesh2dNoWrap]
    }
    fn check_group(&self, g: &Group) -> Result<(), String> {
        if g.topology == SipTopology::Ring1d {
            return Err(format!(
                "the group of SIPs {:?} is a logical ring, not the machine's SIP grid (a subgroup, or a mesh's broadcast from a root other than SIP 0): torus_trees lays its trees on the grid's links; allowed for this group: algorithm ring, bidir_ring, tree, dbtree, dims or hier_lanes",
                g.sips
            ));
        }
        let (w, h) = g.grid;
        let per_sip = g.cubes_per_sip() * g.pes;
        let side = if g.topology == SipTopology::Torus2d {
            3
        } else {
            2
        };
        if per_sip != 1 || w < side || h < side {
            return Err(format!(
                "a group of {w}x{h} SIPs with {per_sip} participants each: torus_trees needs one participant per SIP (cube_mesh 1x1) on a torus of at least 3x3 SIPs or a mesh of at least 2x2, where the trees' arcs are distinct links; allowed: such a system, or algorithm hier_lanes or bidir_ring"
            ));
        }
        Ok(())
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let (w, h) = grid(g);
        let torus = g.topology == SipTopology::Torus2d;
        g.wire_each(|p| {
            DIRS.iter()
                .filter_map(|&d| {
                    let ((x, y), wraps) = step(p % w, p / w, w, h, d);
                    (torus || !wraps).then(|| q.entry(d, g.pe(y * w + x), d.opposite()))
                })
                .collect()
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        CostTerms::unrolled_blocks(g, c, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every tree spans the torus (each node's parent is its `from`
    /// neighbour, one hop shallower) and no arc is in two trees.
    #[test]
    fn a_torus_has_four_arc_disjoint_spanning_trees() {
        for (w, h) in [(3, 3), (4, 4), (3, 5), (6, 4), (16, 16)] {
            let mut arcs = HashSet::new();
            for t in 0..4 {
                let mut max_depth = 0;
                for y in 0..h {
                    for x in 0..w {
                        let me = place(t, x, y, w, h);
                        max_depth = max_depth.max(me.depth);
                        for &d in &me.to {
                            let ((cx, cy), _) = step(x, y, w, h, d);
                            let child = place(t, cx, cy, w, h);
                            assert_eq!(child.from, Some(d.opposite()), "{w}x{h} tree {t}");
                            assert_eq!(child.depth, me.depth + 1, "{w}x{h} tree {t}");
                            assert!(arcs.insert((x, y, d)), "{w}x{h}: arc twice");
                        }
                        match me.from {
                            None => assert_eq!((x, y), (0, 0)),
                            Some(d) => {
                                let ((px, py), _) = step(x, y, w, h, d);
                                let parent = place(t, px, py, w, h);
                                assert!(parent.to.contains(&d.opposite()), "{w}x{h} tree {t}");
                            }
                        }
                    }
                }
                assert!(max_depth < w + h, "{w}x{h} tree {t}: depth {max_depth}");
            }
            // Every arc but the four into the root.
            assert_eq!(arcs.len(), 4 * (w * h - 1), "{w}x{h}");
        }
        // A mesh: two trees from the corner, no wrap-around arc.
        for (w, h) in [(2, 2), (3, 3), (4, 3), (2, 5), (16, 16)] {
            let mut arcs = HashSet::new();
            for t in 0..2 {
                for y in 0..h {
                    for x in 0..w {
                        let me = mesh_place(t, x, y, w, h);
                        for &d in &me.to {
                            let ((cx, cy), wraps) = step(x, y, w, h, d);
                            assert!(!wraps, "{w}x{h} mesh tree {t}: a wrap arc");
                            let child = mesh_place(t, cx, cy, w, h);
                            assert_eq!(child.from, Some(d.opposite()), "{w}x{h} mesh tree {t}");
                            assert_eq!(child.depth, me.depth + 1, "{w}x{h} mesh tree {t}");
                            assert!(arcs.insert((x, y, d)), "{w}x{h} mesh: arc twice");
                        }
                    }
                }
            }
            assert_eq!(arcs.len(), 2 * (w * h - 1), "{w}x{h} mesh");
        }
    }
}
