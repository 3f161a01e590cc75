//! Exponential backoff with jitter, and the tiny random source behind it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The first delay after one failure.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// No delay is longer than this.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// The delay before retrying after `failures` consecutive failures (1 for the first), given a
/// random `unit` in [0, 1): the exponential step `base * 2^(failures-1)`, capped at
/// [`BACKOFF_CAP`], jittered to between half and all of it.
pub fn backoff_delay(failures: u32, unit: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let step = BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_CAP);
    let unit = if unit.is_finite() { unit.clamp(0.0, 1.0) } else { 0.0 };
    step.mul_f64(0.5 + 0.5 * unit).min(BACKOFF_CAP)
}

/// xorshift64*: a small, fast, non-cryptographic generator (for jitter and test ids).
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// Seeded from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Self {
        XorShift(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// Seeded from the clock, the process id and a stack address.
    pub fn from_entropy() -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
        let local = 0u8;
        let addr = &local as *const u8 as u64;
        XorShift::new(nanos ^ (u64::from(std::process::id()) << 32) ^ addr.rotate_left(17))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
