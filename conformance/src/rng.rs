//! A tiny deterministic PRNG (xorshift64*) for random delays in the stress tier.

/// xorshift64* generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (seed 0 is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A short random delay: nothing, a spin, a yield, or a few microseconds of sleep.
    pub fn delay(&mut self) {
        match self.below(8) {
            0..=3 => {}
            4 | 5 => {
                for _ in 0..self.below(2000) {
                    std::hint::spin_loop();
                }
            }
            6 => std::thread::yield_now(),
            _ => std::thread::sleep(std::time::Duration::from_micros(self.below(50))),
        }
    }
}
