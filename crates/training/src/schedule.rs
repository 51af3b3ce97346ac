//! Learning rate over training: linear warm-up, then cosine decay to a tenth of the peak.

/// Learning rate at `step` (0-based) of `total`, peaking at `peak` after `warmup` steps.
pub fn learning_rate(step: usize, total: usize, warmup: usize, peak: f64) -> f64 {
    let floor = peak * 0.1;
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1);
    let progress = ((step - warmup) as f64 / span as f64).min(1.0);
    floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// The steps of an epoch (1-based) after which held-out accuracy is measured: `per_epoch`
/// evenly spaced, the last at the epoch's end.
pub fn evaluation_steps(steps_per_epoch: usize, per_epoch: usize) -> Vec<usize> {
    let per_epoch = per_epoch.clamp(1, steps_per_epoch.max(1));
    let mut steps: Vec<usize> = (1..=per_epoch)
        .map(|i| (i * steps_per_epoch).div_ceil(per_epoch))
        .collect();
    steps.dedup();
    steps
}

/// A small deterministic generator for shuffling (SplitMix64).
pub struct Shuffler(u64);

impl Shuffler {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A standard normal draw (Box-Muller), for initial weights.
    pub fn normal(&mut self) -> f32 {
        let mut uniform = || ((self.next() >> 40) as f32 + 0.5) / (1u64 << 24) as f32;
        let (a, b) = (uniform(), uniform());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f32::consts::PI * b).cos()
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_then_decays_to_a_tenth() {
        let lr = |s| learning_rate(s, 110, 10, 1.0);
        assert!((lr(0) - 0.1).abs() < 1e-12);
        assert!((lr(9) - 1.0).abs() < 1e-12);
        assert!((lr(10) - 1.0).abs() < 1e-12);
        assert!((lr(60) - 0.55).abs() < 1e-12);
        assert!((lr(110) - 0.1).abs() < 1e-12);
        assert!((1..110).all(|s| s <= 10 || lr(s) <= lr(s - 1)));
    }

    #[test]
    fn shuffles_the_same_way_for_the_same_seed() {
        let mut a: Vec<u32> = (0..20).collect();
        let mut b = a.clone();
        Shuffler::new(3).shuffle(&mut a);
        Shuffler::new(3).shuffle(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, (0..20).collect::<Vec<_>>());
        a.sort();
        assert_eq!(a, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn evaluations_are_spread_over_the_epoch_and_end_it() {
        assert_eq!(evaluation_steps(10, 1), vec![10]);
        assert_eq!(evaluation_steps(10, 4), vec![3, 5, 8, 10]);
        assert_eq!(evaluation_steps(3, 8), vec![1, 2, 3]);
        assert_eq!(evaluation_steps(1, 0), vec![1]);
    }
}
