//! Integers a kernel computes that differ between the PEs sharing a program
//! (a ring position) or between the iterations of a loop: [`Sym`], and the
//! digits of a split buffer's atom index built from them: [`Index`].

use kernbench_systems::program::Affine;
use std::ops::{Add, Mul, Neg, Sub};
use std::sync::Arc;

/// An integer known per PE at run time: `c + coeff · param + step · i`.
/// Outside loops the tracer also knows its value on the PE being traced, so
/// kernels may branch on it ([`Sym::value`]); inside a loop body a value that
/// depends on the iteration is symbolic only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sym {
    value: Option<i64>,
    /// None: the expression combines two different parameters, which the
    /// engine cannot evaluate (the tracer reports it where it is used).
    form: Option<Affine>,
}

impl Sym {
    /// A parameter `param` whose value on the traced PE is `value`.
    pub(super) fn param(param: u8, value: i64) -> Sym {
        Sym {
            value: Some(value),
            form: Some(Affine {
                param,
                coeff: 1,
                ..Affine::default()
            }),
        }
    }

    /// The iteration of the loop being traced.
    pub(super) fn iteration() -> Sym {
        Sym {
            value: None,
            form: Some(Affine {
                step: 1,
                ..Affine::default()
            }),
        }
    }

    /// Its value on the PE being traced; None inside a loop body when it depends on the iteration.
    pub fn value(self) -> Option<i64> {
        self.value
    }

    pub(super) fn form(self) -> Option<Affine> {
        self.form
    }
}

impl From<i64> for Sym {
    fn from(c: i64) -> Sym {
        Sym {
            value: Some(c),
            form: Some(Affine::constant(c)),
        }
    }
}

impl From<usize> for Sym {
    fn from(c: usize) -> Sym {
        Sym::from(c as i64)
    }
}

fn combine(a: Affine, b: Affine) -> Option<Affine> {
    let (param, coeff) = match (a.coeff, b.coeff) {
        (0, _) => (b.param, b.coeff),
        (_, 0) => (a.param, a.coeff),
        _ if a.param == b.param => (a.param, a.coeff + b.coeff),
        _ => return None,
    };
    Some(Affine {
        c: a.c + b.c,
        param,
        coeff,
        step: a.step + b.step,
    })
}

impl Add for Sym {
    type Output = Sym;
    fn add(self, o: Sym) -> Sym {
        Sym {
            value: self.value.zip(o.value).map(|(a, b)| a + b),
            form: self.form.zip(o.form).and_then(|(a, b)| combine(a, b)),
        }
    }
}

impl Add<i64> for Sym {
    type Output = Sym;
    fn add(self, c: i64) -> Sym {
        self + Sym::from(c)
    }
}

impl Add<usize> for Sym {
    type Output = Sym;
    fn add(self, c: usize) -> Sym {
        self + Sym::from(c)
    }
}

impl Neg for Sym {
    type Output = Sym;
    fn neg(self) -> Sym {
        self * -1
    }
}

impl Sub for Sym {
    type Output = Sym;
    fn sub(self, o: Sym) -> Sym {
        self + -o
    }
}

impl Sub<usize> for Sym {
    type Output = Sym;
    fn sub(self, c: usize) -> Sym {
        self + -(c as i64)
    }
}

impl Mul<i64> for Sym {
    type Output = Sym;
    fn mul(self, k: i64) -> Sym {
        Sym {
            value: self.value.map(|v| v * k),
            form: self.form.map(|a| Affine {
                c: a.c * k,
                param: a.param,
                coeff: a.coeff * k,
                step: a.step * k,
            }),
        }
    }
}

/// One digit of an atom's index in a split buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Index {
    /// The value mod the level's radix.
    At(Sym),
    /// `table[value mod table length]`: a permutation such as a ring order
    /// (tables come from [`super::Tl::table`], shared by every PE).
    Table(Arc<[u32]>, Sym),
}

impl Index {
    /// Its value for the traced PE at a level of `radix`, when known.
    pub fn value(&self, radix: usize) -> Option<usize> {
        match self {
            Index::At(s) => s.value.map(|v| v.rem_euclid(radix.max(1) as i64) as usize),
            Index::Table(t, s) => s.value.map(|v| {
                let i = v.rem_euclid(t.len().max(1) as i64) as usize;
                t.get(i).map_or(0, |&x| x as usize)
            }),
        }
    }
}

impl From<usize> for Index {
    fn from(c: usize) -> Index {
        Index::At(Sym::from(c))
    }
}

impl From<Sym> for Index {
    fn from(s: Sym) -> Index {
        Index::At(s)
    }
}
