//! A small seedable generator so that a seed reproduces a run on every platform and crate version.

/// SplitMix64: tiny, fast, and good enough for picking tokens from a distribution.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), using the top 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Largest seed chosen for a run: 2^53 - 1, so that the seed survives JSON clients that read
/// numbers as doubles (browsers) and the run can be repeated from what they show.
pub(crate) const MAX_RANDOM_SEED: u64 = (1 << 53) - 1;

pub(crate) fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Mix in an address so two runs in the same nanosecond still differ.
    let local = 0u8;
    (nanos ^ (&local as *const u8 as u64).rotate_left(32)) & MAX_RANDOM_SEED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn known_first_value() {
        // Reference value of SplitMix64 seeded with 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn floats_in_unit_interval() {
        let mut r = SplitMix64::new(1);
        for _ in 0..10_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn random_seeds_fit_a_double_exactly() {
        for _ in 0..100 {
            let seed = random_seed();
            assert!(seed <= MAX_RANDOM_SEED);
            assert_eq!(seed as f64 as u64, seed);
        }
    }
}
