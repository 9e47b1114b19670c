//! VMT (vendor-metered tagging) merge: allocations with the same tag set, in any tag
//! order, become one allocation whose quantity is their sum, so one aggregated record
//! carries each tag set once and its allocations still sum to its quantity.
//!
//! Identity of a tag set: its tags sorted by key (then value). The empty tag set (an
//! allocation with no `tags`, or `tags: []`) is a bucket of its own: the untagged
//! share of the usage. Output is deterministic: allocations in ascending order of their
//! sorted tag set (so the untagged bucket, if any, comes first), each with its tags
//! sorted by key. The merge never invents, drops or renames a tag.

use std::collections::BTreeMap;

use crate::model::{Allocation, Tag};

/// The identity of an allocation's tags: the tags sorted by key, then value.
///
/// Two allocations belong to the same bucket exactly when their `TagSet`s are equal,
/// whatever order the seller wrote the tags in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagSet(Vec<Tag>);

impl TagSet {
    /// The identity of `tags` (sorted copy; the input is not touched).
    pub fn of(tags: &[Tag]) -> Self {
        let mut sorted = tags.to_vec();
        sorted.sort_unstable();
        TagSet(sorted)
    }

    /// The tags, sorted by key then value.
    pub fn tags(&self) -> &[Tag] {
        &self.0
    }

    /// Whether this is the untagged bucket (no tags at all).
    pub fn is_untagged(&self) -> bool {
        self.0.is_empty()
    }
}

/// An accumulator of merged allocations: quantity per distinct tag set.
///
/// Quantities are summed in `i64`; callers keep totals within the per-record cap
/// (2147483647), so no realistic merge can overflow (2,500 buckets of at most the cap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocationMerge {
    buckets: BTreeMap<TagSet, i64>,
}

impl AllocationMerge {
    /// An empty merge (no buckets).
    pub fn new() -> Self {
        AllocationMerge::default()
    }

    /// A merge seeded with already merged allocations (an existing record's).
    pub fn from_allocations(allocations: &[Allocation]) -> Self {
        let mut merge = AllocationMerge::new();
        merge.add_all(allocations);
        merge
    }

    /// Adds one allocation to its tag set's bucket.
    pub fn add(&mut self, allocation: &Allocation) {
        self.add_to(TagSet::of(&allocation.tags), allocation.quantity);
    }

    /// Adds `quantity` to the bucket of an already computed tag set.
    pub fn add_to(&mut self, tag_set: TagSet, quantity: i64) {
        *self.buckets.entry(tag_set).or_insert(0) += quantity;
    }

    /// Adds every allocation of a slice.
    pub fn add_all(&mut self, allocations: &[Allocation]) {
        for allocation in allocations {
            self.add(allocation);
        }
    }

    /// Whether a bucket for `tag_set` exists.
    pub fn contains(&self, tag_set: &TagSet) -> bool {
        self.buckets.contains_key(tag_set)
    }

    /// Number of distinct tag sets merged so far (what the 2,500 limit counts).
    pub fn tag_set_count(&self) -> usize {
        self.buckets.len()
    }

    /// Sum of every bucket.
    pub fn total(&self) -> i64 {
        self.buckets.values().sum()
    }

    /// The merged allocations in deterministic order (see the module doc).
    pub fn into_allocations(self) -> Vec<Allocation> {
        self.buckets
            .into_iter()
            .map(|(tag_set, quantity)| Allocation {
                quantity,
                tags: tag_set.0,
            })
            .collect()
    }
}

/// Merges several lists of allocations (one per usage row) by identical tag set.
///
/// The result sums to the sum of the inputs and does not depend on the order of the
/// lists, of the allocations within them, or of the tags within an allocation.
pub fn merge_allocations<'a, I>(lists: I) -> Vec<Allocation>
where
    I: IntoIterator<Item = &'a [Allocation]>,
{
    let mut merge = AllocationMerge::new();
    for list in lists {
        merge.add_all(list);
    }
    merge.into_allocations()
}

/// Merges new rows' allocations into an existing record's (a late-row fold).
///
/// `existing` is `None` for a record without allocations; the result is the same as
/// [`merge_allocations`] over the existing list followed by the new ones.
pub fn merge_into<'a, I>(existing: Option<&[Allocation]>, lists: I) -> Vec<Allocation>
where
    I: IntoIterator<Item = &'a [Allocation]>,
{
    let mut merge = existing.map_or_else(AllocationMerge::new, AllocationMerge::from_allocations);
    for list in lists {
        merge.add_all(list);
    }
    merge.into_allocations()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tag(key: &str, value: &str) -> Tag {
        Tag {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    fn alloc(quantity: i64, tags: &[(&str, &str)]) -> Allocation {
        Allocation {
            quantity,
            tags: tags.iter().map(|(k, v)| tag(k, v)).collect(),
        }
    }

    #[test]
    fn merge_cases() {
        struct Case {
            name: &'static str,
            rows: Vec<Vec<Allocation>>,
            want: Vec<Allocation>,
        }
        let cases = [
            Case {
                name: "identical tag sets in different tag order merge",
                rows: vec![
                    vec![alloc(3, &[("team", "a"), ("env", "prod")])],
                    vec![alloc(4, &[("env", "prod"), ("team", "a")])],
                ],
                want: vec![alloc(7, &[("env", "prod"), ("team", "a")])],
            },
            Case {
                name: "different values stay apart",
                rows: vec![vec![alloc(1, &[("team", "a")]), alloc(2, &[("team", "b")])]],
                want: vec![alloc(1, &[("team", "a")]), alloc(2, &[("team", "b")])],
            },
            Case {
                name: "a subset of tags is a different set",
                rows: vec![
                    vec![alloc(1, &[("team", "a")])],
                    vec![alloc(2, &[("team", "a"), ("env", "dev")])],
                ],
                want: vec![
                    alloc(2, &[("env", "dev"), ("team", "a")]),
                    alloc(1, &[("team", "a")]),
                ],
            },
            Case {
                name: "the untagged bucket is its own and comes first",
                rows: vec![
                    vec![alloc(5, &[("team", "a")]), alloc(2, &[])],
                    vec![alloc(1, &[])],
                ],
                want: vec![alloc(3, &[]), alloc(5, &[("team", "a")])],
            },
            Case {
                name: "same key and value swapped between tags differ",
                rows: vec![
                    vec![alloc(1, &[("a", "x"), ("b", "y")])],
                    vec![alloc(1, &[("a", "y"), ("b", "x")])],
                ],
                want: vec![
                    alloc(1, &[("a", "x"), ("b", "y")]),
                    alloc(1, &[("a", "y"), ("b", "x")]),
                ],
            },
            Case {
                name: "zero allocations are kept (never dropped silently)",
                rows: vec![vec![alloc(0, &[("team", "z")]), alloc(4, &[("team", "a")])]],
                want: vec![alloc(4, &[("team", "a")]), alloc(0, &[("team", "z")])],
            },
            Case {
                name: "nothing in, nothing out",
                rows: vec![],
                want: vec![],
            },
        ];
        for case in cases {
            let got = merge_allocations(case.rows.iter().map(Vec::as_slice));
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    #[test]
    fn merge_into_existing_record_allocations() {
        let existing = vec![alloc(10, &[("team", "a")]), alloc(5, &[("team", "b")])];
        let late = [
            vec![alloc(2, &[("team", "b")])],
            vec![alloc(1, &[("team", "c")])],
        ];
        let merged = merge_into(Some(&existing), late.iter().map(Vec::as_slice));
        assert_eq!(
            merged,
            vec![
                alloc(10, &[("team", "a")]),
                alloc(7, &[("team", "b")]),
                alloc(1, &[("team", "c")]),
            ]
        );
        let fresh = merge_into(None, late.iter().map(Vec::as_slice));
        assert_eq!(
            fresh,
            vec![alloc(2, &[("team", "b")]), alloc(1, &[("team", "c")])]
        );
    }

    #[test]
    fn accumulator_counts_distinct_tag_sets() {
        let mut merge = AllocationMerge::new();
        merge.add(&alloc(1, &[("k", "v"), ("a", "b")]));
        merge.add(&alloc(1, &[("a", "b"), ("k", "v")]));
        merge.add(&alloc(1, &[]));
        assert_eq!(merge.tag_set_count(), 2);
        assert_eq!(merge.total(), 3);
        assert!(merge.contains(&TagSet::of(&[tag("k", "v"), tag("a", "b")])));
        assert!(merge.contains(&TagSet::of(&[])));
        assert!(TagSet::of(&[]).is_untagged());
        assert_eq!(
            TagSet::of(&[tag("b", "1"), tag("a", "2")]).tags()[0].key,
            "a"
        );
    }

    fn arb_allocation() -> impl Strategy<Value = Allocation> {
        let tag = (0u8..4, 0u8..3).prop_map(|(k, v)| Tag {
            key: format!("k{k}"),
            value: format!("v{v}"),
        });
        (0i64..1_000, proptest::collection::vec(tag, 0..4)).prop_map(|(quantity, mut tags)| {
            // One value per key, as the guardrails require.
            tags.sort_by(|a, b| a.key.cmp(&b.key));
            tags.dedup_by(|a, b| a.key == b.key);
            Allocation { quantity, tags }
        })
    }

    proptest! {
        #[test]
        fn merged_allocations_sum_to_the_inputs(
            rows in proptest::collection::vec(proptest::collection::vec(arb_allocation(), 1..6), 0..12)
        ) {
            let total: i64 = rows.iter().flatten().map(|a| a.quantity).sum();
            let merged = merge_allocations(rows.iter().map(Vec::as_slice));
            prop_assert_eq!(merged.iter().map(|a| a.quantity).sum::<i64>(), total);
            let mut sets: Vec<TagSet> = merged.iter().map(|a| TagSet::of(&a.tags)).collect();
            let before = sets.len();
            sets.dedup();
            prop_assert_eq!(sets.len(), before, "each tag set appears once");
        }

        #[test]
        fn merge_is_order_independent(
            rows in proptest::collection::vec(proptest::collection::vec(arb_allocation(), 1..6), 0..12),
            seed in any::<u64>(),
        ) {
            let merged = merge_allocations(rows.iter().map(Vec::as_slice));
            // Reverse and rotate the rows, the allocations and the tags inside them.
            let mut shuffled: Vec<Vec<Allocation>> = rows.clone();
            shuffled.reverse();
            if !shuffled.is_empty() {
                let len = shuffled.len();
                shuffled.rotate_left((seed as usize) % len);
            }
            for list in &mut shuffled {
                list.reverse();
                for allocation in list.iter_mut() {
                    allocation.tags.reverse();
                }
            }
            prop_assert_eq!(merge_allocations(shuffled.iter().map(Vec::as_slice)), merged.clone());
            // Merging an already merged list is a no-op, and splitting the input
            // between an existing record and late rows gives the same answer.
            prop_assert_eq!(merge_allocations([merged.as_slice()]), merged.clone());
            let split = rows.len() / 2;
            let existing = merge_allocations(rows[..split].iter().map(Vec::as_slice));
            prop_assert_eq!(merge_into(Some(&existing), rows[split..].iter().map(Vec::as_slice)), merged);
        }
    }
}
