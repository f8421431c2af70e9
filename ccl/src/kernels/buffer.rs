//! A participant's buffer cut into atoms ([`Buffer`], [`Atom`]), the block
//! arithmetic of [`split`], and [`combine`], the reduction of two tiles.

use crate::ReduceOp;
use kernbench_runtime::kernel::{Addr, Index, Part, Tile, Tl};
use kernbench_systems::program::QDir;
use rustc_hash::FxHashMap;

/// `n` elements in `parts` contiguous blocks, the first `n % parts` one larger:
/// (offset, length) pairs.
pub fn split(n: usize, parts: usize) -> Vec<(usize, usize)> {
    let (q, r) = (n / parts, n % parts);
    let mut off = 0;
    (0..parts)
        .map(|i| {
            let len = q + usize::from(i < r);
            off += len;
            (off - len, len)
        })
        .collect()
}

/// Offset of block `i` (0 to `parts`) of [`split`]`(n, parts)`.
pub fn block_offset(n: usize, parts: usize, i: usize) -> usize {
    i * (n / parts) + i.min(n % parts)
}

/// An atom of a [`Buffer`]: one index per level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom(pub Vec<Index>);

/// This participant's buffer (in its cube's HBM or its own TCM, see
/// [`crate::KernelArgs::buffer`]), cut into atoms. Atom indices
/// may be per-PE parameters ([`Sym`](kernbench_runtime::kernel::Sym)), so a kernel that addresses blocks
/// relative to its position traces to one program for every participant;
/// the tiles the kernel holds are tracked by the atoms' values on the PE
/// being traced.
pub struct Buffer {
    base: Addr,
    elems: usize,
    /// The first level's radix.
    head: usize,
    /// The radices of the levels after the first: one list for every block
    /// of the first level, or one per block ([`Buffer::ragged`]).
    tails: Vec<Vec<usize>>,
    tiles: FxHashMap<usize, Tile>,
}

impl Buffer {
    /// The buffer of `elems` f16 at `base`, split level by level by `radices`.
    pub fn new(base: Addr, elems: usize, radices: &[usize]) -> Self {
        let (head, tail) = radices.split_first().map_or((1, &[][..]), |(h, t)| (*h, t));
        Self {
            base,
            elems,
            head,
            tails: vec![tail.to_vec()],
            tiles: FxHashMap::default(),
        }
    }

    /// The buffer split first into `tails.len()` blocks, block `i` then
    /// split by `tails[i]`: blocks cut differently, such as two halves that
    /// run their rings in different orders. An atom's first index must be
    /// the same on every PE sharing the program (a constant).
    pub fn ragged(base: Addr, elems: usize, tails: Vec<Vec<usize>>) -> Self {
        Self {
            base,
            elems,
            head: tails.len(),
            tails,
            tiles: FxHashMap::default(),
        }
    }

    /// The radices of the levels after the first of the atoms whose first
    /// index is `first`.
    fn tail(&self, first: Option<&Index>) -> &[usize] {
        match (self.tails.len(), first) {
            (1, _) => &self.tails[0],
            (_, Some(i)) => {
                let b = i
                    .value(self.head)
                    .expect("a ragged buffer's first index is a constant");
                &self.tails[b]
            }
            (_, None) => unreachable!("the first index of a ragged buffer's atom is given"),
        }
    }

    /// The radices of every level of the atoms whose first index is `first`.
    fn radices(&self, first: Option<&Index>) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.head).chain(self.tail(first).iter().copied())
    }

    /// The atoms whose leading indices are `prefix`, in buffer order.
    pub fn atoms(&self, prefix: &[Index]) -> Vec<Atom> {
        if prefix.is_empty() && self.tails.len() > 1 {
            return (0..self.head)
                .flat_map(|b| self.atoms(&[Index::from(b)]))
                .collect();
        }
        let mut out = vec![Atom(prefix.to_vec())];
        for r in self.radices(prefix.first()).skip(prefix.len()) {
            out = out
                .into_iter()
                .flat_map(|a| {
                    (0..r).map(move |d| {
                        let mut v = a.0.clone();
                        v.push(Index::from(d));
                        Atom(v)
                    })
                })
                .collect();
        }
        out
    }

    /// The atom's place in memory, for the tracer.
    pub fn part(&self, a: &Atom) -> Part {
        Part {
            base: self.base,
            elems: self.elems,
            digits: a.0.iter().cloned().zip(self.radices(a.0.first())).collect(),
        }
    }

    /// The atom's number on the PE being traced (None inside a loop body):
    /// its digits in mixed radix, each tail padded to the longest one's
    /// capacity so blocks of a ragged buffer do not share numbers.
    fn key(&self, a: &Atom) -> Option<usize> {
        let capacity = self
            .tails
            .iter()
            .map(|t| t.iter().product::<usize>())
            .max()?;
        let (first, rest) = a.0.split_first()?;
        let mut k = 0;
        for (i, &r) in rest.iter().zip(self.tail(Some(first))) {
            k = k * r + i.value(r)?;
        }
        Some(first.value(self.head)? * capacity + k)
    }

    fn held_key(&self, a: &Atom) -> usize {
        self.key(a)
            .expect("atoms the kernel holds have indices known on the traced PE")
    }

    /// Loads the atoms from HBM.
    pub fn load(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            let t = tl.load_part(&self.part(a));
            self.tiles.insert(self.held_key(a), t);
        }
    }

    /// Loads the atoms that are not held yet, in order.
    pub fn ensure(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            if !self.tiles.contains_key(&self.held_key(a)) {
                self.load(tl, std::slice::from_ref(a));
            }
        }
    }

    /// Stores the atoms to HBM.
    pub fn store(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            let t = self.tile(a);
            tl.store_part(&self.part(a), t);
        }
    }

    pub fn tile(&self, a: &Atom) -> Tile {
        *self
            .tiles
            .get(&self.held_key(a))
            .expect("the kernel loaded or received this atom before using it")
    }

    /// Holds `t` as the atom's tile.
    pub fn set(&mut self, a: &Atom, t: Tile) {
        self.tiles.insert(self.held_key(a), t);
    }

    /// How many atoms the kernel holds in registers.
    pub fn held(&self) -> usize {
        self.tiles.len()
    }

    /// Sends the atoms on `dir`.
    pub fn send(&self, tl: &mut Tl, atoms: &[Atom], dir: QDir) {
        for a in atoms {
            tl.send(dir, self.tile(a));
        }
    }

    /// Receives atom `a` on `from`, combines it in, forwards the result on
    /// `to`.
    pub fn recv_combine(
        &mut self,
        tl: &mut Tl,
        op: ReduceOp,
        a: &Atom,
        from: QDir,
        to: Option<QDir>,
    ) {
        let x = tl.recv_part(from, &self.part(a));
        let t = combine(tl, op, self.tile(a), x);
        self.set(a, t);
        if let Some(d) = to {
            tl.send(d, t);
        }
    }

    /// Receives atom `a` on `from` (replacing it) and forwards it on `to`.
    pub fn recv_replace(&mut self, tl: &mut Tl, a: &Atom, from: QDir, to: Option<QDir>) {
        let x = tl.recv_part(from, &self.part(a));
        self.set(a, x);
        if let Some(d) = to {
            tl.send(d, x);
        }
    }
}

/// `a ∘ b` for the reduction.
pub fn combine(tl: &mut Tl, op: ReduceOp, a: Tile, b: Tile) -> Tile {
    match op {
        ReduceOp::Sum => tl.add(a, b),
        ReduceOp::Max => tl.max(a, b),
        ReduceOp::Min => tl.min(a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_exactly_with_larger_blocks_first() {
        assert_eq!(split(10, 4), vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
        assert_eq!(split(2, 4), vec![(0, 1), (1, 1), (2, 0), (2, 0)]);
        assert_eq!(split(0, 2), vec![(0, 0), (0, 0)]);
    }

    #[test]
    fn atoms_enumerate_blocks_in_buffer_order() {
        let b = Buffer::new(Addr::hbm(0), 100, &[2, 3, 2]);
        let digits = |a: &Atom| -> Vec<usize> {
            a.0.iter()
                .zip([2, 3, 2])
                .map(|(i, r)| i.value(r).unwrap())
                .collect()
        };
        let all = b.atoms(&[]);
        assert_eq!(all.len(), 12);
        assert_eq!(digits(&all[7]), vec![1, 0, 1]);
        let block = b.atoms(&[1.into(), 2.into()]);
        assert_eq!(
            block.iter().map(digits).collect::<Vec<_>>(),
            vec![vec![1, 2, 0], vec![1, 2, 1]]
        );
        assert_eq!(b.part(&all[7]).digits.len(), 3);
    }

    #[test]
    fn a_ragged_buffer_cuts_each_first_block_its_own_way() {
        // Half 0 (50 elements) in 2 × 3 atoms, half 1 (50) in 5.
        let b = Buffer::ragged(Addr::hbm(0), 100, vec![vec![2, 3], vec![5]]);
        let all = b.atoms(&[]);
        assert_eq!(all.len(), 11);
        assert_eq!(b.atoms(&[1.into()]).len(), 5);
        let radices: Vec<usize> = b.part(&all[10]).digits.iter().map(|d| d.1).collect();
        assert_eq!(radices, vec![2, 5]);
        let radices: Vec<usize> = b.part(&all[0]).digits.iter().map(|d| d.1).collect();
        assert_eq!(radices, vec![2, 2, 3]);
        // Every atom has its own key.
        let mut keys: Vec<usize> = all.iter().map(|a| b.key(a).unwrap()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 11);
    }
}
