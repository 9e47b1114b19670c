//! Unique ids in UUID form (`MeteringRecordId`s, CloudTrail event and request ids,
//! the Agreement API's ids) without a randomness dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unique `MeteringRecordId`s in UUID form, without a randomness dependency: a
/// per-process seed from the wall clock mixed with a counter (splitmix64).
#[derive(Debug, Clone)]
pub(crate) struct RecordIdGenerator {
    seed: u64,
    counter: u64,
}

impl RecordIdGenerator {
    pub(crate) fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        Self::seeded(seed)
    }

    pub(crate) fn seeded(seed: u64) -> Self {
        Self { seed, counter: 0 }
    }

    pub(crate) fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn next_id(&mut self) -> String {
        self.counter += 1;
        let high = Self::mix(self.seed ^ self.counter);
        let low = Self::mix(high ^ self.counter.rotate_left(32));
        // Version 4 / variant 1 bits, so the id looks like any UUID.
        let high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
        let low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn record_ids_are_unique_and_uuid_shaped() {
        let mut ids = RecordIdGenerator::new();
        let all: BTreeSet<String> = (0..10_000).map(|_| ids.next_id()).collect();
        assert_eq!(all.len(), 10_000);
        let one = all.iter().next().expect("some id");
        assert_eq!(one.len(), 36);
        assert_eq!(&one[14..15], "4");
    }

    #[test]
    fn seeded_record_ids_repeat_with_their_seed() {
        let ids = |seed| {
            let mut ids = RecordIdGenerator::seeded(seed);
            (0..3).map(|_| ids.next_id()).collect::<Vec<_>>()
        };
        assert_eq!(ids(7), ids(7));
        assert_ne!(ids(7), ids(8));
    }
}
