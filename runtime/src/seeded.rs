//! Seeded, deterministic data for functional runs (GEMM operands, TP
//! weights): the same seed gives the same values on every machine.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` values uniform in [-1, 1), each exactly representable in f16, so a
/// tensor written with them holds what an f32 reference computes with.
pub fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| half::f16::from_f32(rng.random_range(-1.0f32..1.0)).to_f32())
        .collect()
}

/// `n` small integers in [-lo, lo], as f32: products and sums of few of them stay exact in f16.
pub fn small_ints(seed: u64, n: usize, lo: i32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-lo..=lo) as f32).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_same_seed_gives_the_same_values() {
        assert_eq!(super::uniform(7, 5), super::uniform(7, 5));
        assert_ne!(super::uniform(7, 5), super::uniform(8, 5));
        assert!(
            super::uniform(1, 1000)
                .iter()
                .all(|v| (-1.0..1.0).contains(v))
        );
    }
}
