//! Where the pipeline's randomness comes from: [`random_u64`] (backoff jitter, claim and
//! final-write ids), real or, in a simulation, a seeded per-thread stream. Below the
//! ports and every use case, so none imports another for it.

use std::hash::{BuildHasher, RandomState};

/// 64 uniformly random bits from the standard library's randomly keyed hasher (or,
/// in a simulation that seeded this thread with `seed_randomness` (test-util), from that seed).
pub fn random_u64() -> u64 {
    #[cfg(feature = "test-util")]
    if let Some(bits) = seeded::next() {
        return bits;
    }
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Makes [`random_u64`] (jitter, claim ids) on this thread a deterministic stream from
/// `seed`, so a simulation schedule replays exactly; `None` restores real randomness.
#[cfg(feature = "test-util")]
pub fn seed_randomness(seed: Option<u64>) {
    seeded::set(seed);
}

#[cfg(feature = "test-util")]
mod seeded {
    //! The per-thread seeded stream behind `random_u64` in simulations (splitmix64).
    use std::cell::Cell;

    thread_local! {
        static STATE: Cell<Option<u64>> = const { Cell::new(None) };
    }

    pub(super) fn set(seed: Option<u64>) {
        STATE.with(|s| s.set(seed));
    }

    pub(super) fn next() -> Option<u64> {
        STATE.with(|s| {
            let state = s.get()?.wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(Some(state));
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            Some(z ^ (z >> 31))
        })
    }
}
