//! Element types of data: f16, bf16 and f32.
//!
//! Values are held as f32 wherever data lives (memory, registers, messages),
//! each one exactly representable in its dtype: every op computes in f32 and
//! rounds its output once to the output's dtype ([`DType::round`]). Bytes
//! moved and stored are `elements × DType::bytes`. The vector unit's lanes
//! are 16 bits wide, so an f32 element takes two ([`DType::lane_width`]);
//! the MAC array takes f16 and bf16 operands at its full rate and f32
//! operands at a quarter of it ([`DType::mac_passes`]). docs/model.md
//! §Data types states the same.

use half::{bf16, f16};

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DType {
    /// IEEE binary16: 11-bit significand, unit roundoff 2⁻¹¹.
    #[default]
    F16,
    /// bfloat16: 8-bit significand, f32's exponent range, unit roundoff 2⁻⁸.
    BF16,
    /// IEEE binary32: unit roundoff 2⁻²⁴.
    F32,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

    /// Bytes per element: 2, 2, 4.
    pub const fn bytes(self) -> u64 {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
        }
    }

    /// The name a plan, a message or a trace uses: `f16`, `bf16`, `f32`.
    pub fn name(self) -> &'static str {
        ["f16", "bf16", "f32"][self as usize]
    }

    /// The dtype named `s`, or an error naming what is allowed.
    pub fn parse(s: &str) -> Result<DType, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype '{s}'; allowed: f16, bf16, f32"))
    }

    /// `x` rounded to the nearest value of this dtype (ties to even).
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
            DType::F32 => x,
        }
    }

    /// The unit roundoff u: half the distance from 1 to the next value.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F16 => 2f64.powi(-11),
            DType::BF16 => 2f64.powi(-8),
            DType::F32 => 2f64.powi(-24),
        }
    }

    /// 16-bit vector lanes one element occupies: 1, 1, 2 (an f32 pass over
    /// n elements takes as long as an f16 pass over 2n).
    pub const fn lane_width(self) -> u64 {
        self.bytes() / 2
    }

    /// The elements one vector pass of `lanes` 16-bit lanes covers per tick.
    pub fn lanes(self, lanes: u64) -> u64 {
        (lanes / self.lane_width()).max(1)
    }

    /// MAC-array passes per multiply-accumulate: 1 for f16 and bf16
    /// operands, 4 for f32 (each f32 product is built from four 16-bit
    /// partial products).
    pub const fn mac_passes(self) -> u64 {
        match self {
            DType::F16 | DType::BF16 => 1,
            DType::F32 => 4,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounding keeps each dtype's significand: 1 + 2⁻¹⁰ survives f16 and
    /// not bf16, 1 + 2⁻²⁰ only f32; names round-trip and a bad one says what is allowed.
    #[test]
    fn rounding_sizes_and_names() {
        let x = 1.0 + 2f32.powi(-10);
        assert_eq!(DType::F16.round(x), x);
        assert_eq!(DType::BF16.round(x), 1.0);
        let y = 1.0 + 2f32.powi(-20);
        assert_eq!(DType::F16.round(y), 1.0);
        assert_eq!(DType::F32.round(y), y);
        assert_eq!(DType::ALL.map(DType::bytes), [2, 2, 4]);
        assert_eq!(DType::ALL.map(|d| d.lanes(16)), [16, 16, 8]);
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Ok(d));
        }
        assert_eq!(
            DType::parse("fp8").unwrap_err(),
            "unknown dtype 'fp8'; allowed: f16, bf16, f32"
        );
    }
}
