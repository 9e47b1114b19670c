//! Group-level guardrails (G1..G4 in [`super`]'s table): one group's per-row-valid rows
//! judged together with its existing aggregated record, so an hour never mixes tagged and
//! untagged usage and its merged allocations always fit one record.

use crate::aggregate::vmt::{AllocationMerge, TagSet};
use crate::model::{
    AggregatedRecord, Allocation, GroupKey, RawUsageRow, ReasonCode, ValidUsageRow,
};
use crate::time::HourBucket;

use super::{
    GuardrailContext, GuardrailOutcome, MAX_ALLOCATIONS_PER_RECORD, RejectedRow, validate_rows,
};

/// Whether a row or record carries VMT allocations: the two modes a group may not mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    /// The usage carries `usageAllocations`.
    Tagged,
    /// The usage carries none.
    Untagged,
}

impl AllocationMode {
    /// The mode of a row, or `None` for a zero-quantity row (which is ignored by the
    /// mixing rule and never contributes allocations).
    pub fn of_row(row: &ValidUsageRow) -> Option<AllocationMode> {
        Self::of(row.quantity, row.allocations.is_some())
    }

    /// The mode an existing record fixes for late rows, or `None` when its quantity is
    /// zero (a record of zero rows fixes nothing, just as zero rows do not).
    pub fn of_record(record: &AggregatedRecord) -> Option<AllocationMode> {
        Self::of(record.quantity, record.allocations.is_some())
    }

    fn of(quantity: i64, tagged: bool) -> Option<AllocationMode> {
        match (quantity, tagged) {
            (0, _) => None,
            (_, true) => Some(AllocationMode::Tagged),
            (_, false) => Some(AllocationMode::Untagged),
        }
    }
}

/// Group-level checks (G1..G3 in the module doc) over one group's per-row-valid rows
/// and its existing aggregated record, if any.
///
/// Accepted rows come back in `(timestamp, sort key)` order; rejected rows in the
/// order they were judged. The rows are assumed to belong to one group (see
/// [`screen_group`], which also sorts out rows of other groups).
pub fn validate_group(
    mut rows: Vec<ValidUsageRow>,
    existing: Option<&AggregatedRecord>,
) -> GuardrailOutcome {
    rows.sort_by(|a, b| (a.timestamp, &a.sort_key).cmp(&(b.timestamp, &b.sort_key)));
    let mut outcome = GuardrailOutcome::default();
    if let Some(record) = existing.filter(|r| !r.accepts_folds()) {
        tracing::debug!(group = %record.key, status = %record.status, rows = rows.len(),
            "late rows for an hour already submitted");
        outcome.rejected = rows
            .into_iter()
            .map(|row| RejectedRow {
                sort_key: row.sort_key,
                reason: ReasonCode::HourAlreadySubmitted,
            })
            .collect();
        return outcome;
    }

    let fixed_mode = existing.and_then(AllocationMode::of_record);
    let row_modes = |mode| rows.iter().any(|r| AllocationMode::of_row(r) == Some(mode));
    let mixed_without_record = fixed_mode.is_none()
        && row_modes(AllocationMode::Tagged)
        && row_modes(AllocationMode::Untagged);

    let mut merge = existing
        .and_then(|r| r.allocations.as_deref())
        .map_or_else(AllocationMerge::new, AllocationMerge::from_allocations);
    let mut bytes: usize =
        existing
            .and_then(|r| r.allocations.as_deref())
            .map_or(0, |allocations| {
                allocations
                    .iter()
                    .map(|a| allocation_item_bytes(&a.tags))
                    .sum()
            });
    for row in rows {
        let reason = match (AllocationMode::of_row(&row), fixed_mode) {
            (Some(_), None) if mixed_without_record => {
                Some(ReasonCode::MixedAllocatedAndUnallocated)
            }
            (Some(mode), Some(fixed)) if mode != fixed => {
                Some(ReasonCode::MixedAllocatedAndUnallocated)
            }
            (Some(AllocationMode::Tagged), _) => admit_tag_sets(
                &mut merge,
                &mut bytes,
                row.allocations.as_deref().unwrap_or_default(),
            ),
            _ => None,
        };
        match reason {
            Some(reason) => outcome.rejected.push(RejectedRow {
                sort_key: row.sort_key,
                reason,
            }),
            None => outcome.accepted.push(row),
        }
    }
    outcome
}

/// Adds a tagged row's allocations to the merge unless its new tag sets would take the
/// record past [`MAX_ALLOCATIONS_PER_RECORD`] (then the row is `TooManyAllocations`) or
/// its allocations past [`MAX_ALLOCATION_BYTES_PER_RECORD`] (then `RecordTooLarge`);
/// `bytes` is the running size of the merged allocations.
fn admit_tag_sets(
    merge: &mut AllocationMerge,
    bytes: &mut usize,
    allocations: &[Allocation],
) -> Option<ReasonCode> {
    // Each allocation's identity is computed once, for the count and for the merge.
    let sets: Vec<(TagSet, i64, usize)> = allocations
        .iter()
        .map(|a| {
            (
                TagSet::of(&a.tags),
                a.quantity,
                allocation_item_bytes(&a.tags),
            )
        })
        .collect();
    let mut new_sets: Vec<(&TagSet, usize)> = sets
        .iter()
        .map(|(set, _, size)| (set, *size))
        .filter(|(set, _)| !merge.contains(set))
        .collect();
    new_sets.sort_unstable();
    new_sets.dedup();
    if merge.tag_set_count() + new_sets.len() > MAX_ALLOCATIONS_PER_RECORD {
        return Some(ReasonCode::TooManyAllocations);
    }
    let added: usize = new_sets.iter().map(|(_, size)| size).sum();
    if *bytes + added > MAX_ALLOCATION_BYTES_PER_RECORD {
        return Some(ReasonCode::RecordTooLarge);
    }
    *bytes += added;
    for (set, quantity, _) in sets {
        merge.add_to(set, quantity);
    }
    None
}

/// Most bytes the merged `usageAllocations` of one aggregated record may take: a
/// DynamoDB item holds 400 KB (names and values, UTF-8), and the record's other
/// attributes and the index copy need well under the 100 KB left.
pub const MAX_ALLOCATION_BYTES_PER_RECORD: usize = 300 * 1024;

/// The bytes one allocation with `tags` takes in the stored record, as DynamoDB counts
/// item size (attribute name and value lengths, plus per-element overhead; numbers at
/// their 21-byte maximum), rounded up.
pub fn allocation_item_bytes(tags: &[crate::model::Tag]) -> usize {
    const ELEMENT_OVERHEAD: usize = 3;
    const NUMBER_MAX: usize = 21;
    let tag_bytes: usize = tags
        .iter()
        .map(|t| {
            crate::model::attr::TAG_KEY.len()
                + t.key.len()
                + crate::model::attr::TAG_VALUE.len()
                + t.value.len()
                + 3 * ELEMENT_OVERHEAD
        })
        .sum();
    crate::model::attr::ALLOCATED_USAGE_QUANTITY.len()
        + NUMBER_MAX
        + crate::model::attr::TAGS.len()
        + tag_bytes
        + 3 * ELEMENT_OVERHEAD
}

/// Every guardrail for one group: per-row checks, then group checks.
///
/// Rows that pass the per-row checks but belong to another group (a different license,
/// account, dimension or hour than `key`: possible when a dimension contains `#` and
/// a sort-key prefix query matches a neighbour's rows) are neither counted nor rejected
/// here; their sort keys are returned in `other_group` for that group to handle.
/// Rejected rows are sorted by sort key.
pub fn screen_group(
    key: &GroupKey,
    rows: &[RawUsageRow],
    existing: Option<&AggregatedRecord>,
    ctx: &GuardrailContext,
) -> ScreenedGroup {
    let per_row = validate_rows(rows, ctx);
    let (mine, theirs): (Vec<_>, Vec<_>) = per_row
        .accepted
        .into_iter()
        .partition(|row| row_in_group(row, key));
    let mut outcome = validate_group(mine, existing);
    outcome.rejected.extend(per_row.rejected);
    outcome.rejected.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    ScreenedGroup {
        outcome,
        other_group: theirs.into_iter().map(|row| row.sort_key).collect(),
    }
}

/// The result of [`screen_group`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScreenedGroup {
    /// Rows of this group: accepted (in `(timestamp, sort key)` order) or rejected.
    pub outcome: GuardrailOutcome,
    /// Sort keys of valid rows that belong to another group; leave them pending.
    pub other_group: Vec<String>,
}

/// Whether a valid row belongs to `key`'s group.
pub fn row_in_group(row: &ValidUsageRow, key: &GroupKey) -> bool {
    row.license_arn == key.license_arn
        && row.customer_aws_account_id == key.customer_aws_account_id
        && row.dimension == key.dimension
        && HourBucket::containing(row.timestamp) == key.hour
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::guardrails::fixtures::*;
    use crate::model::{AggregatedStatus, Tag, attr};
    use proptest::prelude::*;

    fn valid(
        dimension: &str,
        timestamp: &str,
        quantity: i64,
        allocations: Option<Vec<Allocation>>,
    ) -> ValidUsageRow {
        ValidUsageRow {
            license_arn: LICENSE.to_string(),
            sort_key: format!("{ACCOUNT}#{dimension}#{timestamp}"),
            customer_aws_account_id: ACCOUNT.to_string(),
            dimension: dimension.to_string(),
            timestamp: instant(timestamp),
            quantity,
            allocations,
            product_code: None,
        }
    }

    /// A valid `requests` row at second `second` of the group's hour.
    fn at(second: u32, quantity: i64, allocations: Option<Vec<Allocation>>) -> ValidUsageRow {
        valid("requests", &ts(second), quantity, allocations)
    }

    fn tagged(q: i64, team: &str) -> Option<Vec<Allocation>> {
        Some(vec![Allocation {
            quantity: q,
            tags: vec![Tag {
                key: "team".to_string(),
                value: team.to_string(),
            }],
        }])
    }

    fn group_key() -> GroupKey {
        GroupKey {
            license_arn: LICENSE.to_string(),
            customer_aws_account_id: ACCOUNT.to_string(),
            dimension: "requests".to_string(),
            hour: "2026-11-30T09".parse().unwrap(),
        }
    }

    fn record(
        quantity: i64,
        allocations: Option<Vec<Allocation>>,
        status: AggregatedStatus,
    ) -> AggregatedRecord {
        AggregatedRecord {
            allocations,
            status,
            ..crate::memory::fixtures::pending_record(group_key(), PRODUCT, quantity, 1)
        }
    }

    fn verdicts(outcome: &GuardrailOutcome) -> Vec<(String, Option<ReasonCode>)> {
        let mut all: Vec<(String, Option<ReasonCode>)> = outcome
            .accepted
            .iter()
            .map(|r| (r.sort_key.clone(), None))
            .chain(
                outcome
                    .rejected
                    .iter()
                    .map(|r| (r.sort_key.clone(), Some(r.reason))),
            )
            .collect();
        all.sort();
        all
    }

    fn key_at(second: u32) -> String {
        format!("{ACCOUNT}#requests#2026-11-30T09:00:{second:02}Z")
    }

    fn ts(second: u32) -> String {
        format!("2026-11-30T09:00:{second:02}Z")
    }

    #[test]
    fn group_mixing_rule() {
        use ReasonCode::MixedAllocatedAndUnallocated as Mixed;
        struct Case {
            name: &'static str,
            rows: Vec<ValidUsageRow>,
            existing: Option<AggregatedRecord>,
            rejected: Vec<u32>,
        }
        let cases = [
            Case {
                name: "all tagged",
                rows: vec![at(1, 3, tagged(3, "a")), at(2, 4, tagged(4, "b"))],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "all untagged",
                rows: vec![at(1, 3, None), at(2, 4, None)],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "zero rows are ignored either way",
                rows: vec![
                    at(1, 3, tagged(3, "a")),
                    at(2, 0, None),
                    at(3, 0, tagged(0, "z")),
                ],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "mixed without a record: every non-zero row, zero rows counted",
                rows: vec![at(1, 3, tagged(3, "a")), at(2, 4, None), at(3, 0, None)],
                existing: None,
                rejected: vec![1, 2],
            },
            Case {
                name: "tagged record: late untagged non-zero rows rejected",
                rows: vec![at(1, 3, tagged(3, "a")), at(2, 4, None)],
                existing: Some(record(5, tagged(5, "a"), AggregatedStatus::Pending)),
                rejected: vec![2],
            },
            Case {
                name: "untagged record: late tagged non-zero rows rejected",
                rows: vec![at(1, 3, tagged(3, "a")), at(2, 4, None)],
                existing: Some(record(5, None, AggregatedStatus::Pending)),
                rejected: vec![1],
            },
            Case {
                name: "zero record fixes no mode",
                rows: vec![at(1, 3, tagged(3, "a"))],
                existing: Some(record(0, None, AggregatedStatus::Pending)),
                rejected: vec![],
            },
            Case {
                name: "zero record, late rows mixing: all non-zero rejected",
                rows: vec![at(1, 3, tagged(3, "a")), at(2, 4, None)],
                existing: Some(record(0, None, AggregatedStatus::Pending)),
                rejected: vec![1, 2],
            },
        ];
        for case in cases {
            let outcome = validate_group(case.rows.clone(), case.existing.as_ref());
            let want: Vec<(String, Option<ReasonCode>)> = {
                let mut all: Vec<_> = case
                    .rows
                    .iter()
                    .map(|r| {
                        let second = r.timestamp.format("%S").to_string().parse::<u32>().unwrap();
                        let reason = case.rejected.contains(&second).then_some(Mixed);
                        (r.sort_key.clone(), reason)
                    })
                    .collect();
                all.sort();
                all
            };
            assert_eq!(verdicts(&outcome), want, "{}", case.name);
        }
    }

    #[test]
    fn late_rows_for_a_submitted_hour_are_rejected() {
        let rows = vec![at(1, 3, None), at(2, 0, None)];
        for status in AggregatedStatus::ALL.iter().filter(|s| s.is_terminal()) {
            let outcome = validate_group(rows.clone(), Some(&record(5, None, *status)));
            assert!(outcome.accepted.is_empty(), "{status}");
            assert!(
                outcome
                    .rejected
                    .iter()
                    .all(|r| r.reason == ReasonCode::HourAlreadySubmitted)
            );
            assert_eq!(outcome.rejected.len(), 2);
        }
        let pending = validate_group(rows, Some(&record(5, None, AggregatedStatus::Pending)));
        assert_eq!(pending.accepted.len(), 2);
    }

    /// Allocations over `teams` (one tag set each), `each` units apiece.
    fn many(teams: std::ops::Range<usize>, each: i64) -> Vec<Allocation> {
        teams
            .map(|i| Allocation {
                quantity: each,
                tags: vec![Tag {
                    key: "team".to_string(),
                    value: format!("t{i}"),
                }],
            })
            .collect()
    }

    /// `n` allocations of one unit, each with five maximal tags (key 100, value 256).
    fn heavy(range: std::ops::Range<usize>) -> Vec<Allocation> {
        range
            .map(|i| Allocation {
                quantity: 1,
                tags: (0..5)
                    .map(|k| Tag {
                        key: format!("{k}{}", "k".repeat(99)),
                        value: format!("{i:08}{}", "v".repeat(248)),
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn a_record_never_outgrows_one_dynamodb_item() {
        // GIVEN tag sets of ~1.9 KB each: 2,500 of them would make a 4.7 MB item
        let per_set = allocation_item_bytes(&heavy(0..1)[0].tags);
        assert!(per_set > 1_800, "{per_set}");
        let fit = MAX_ALLOCATION_BYTES_PER_RECORD / per_set;
        // WHEN rows bring first what fits, then one more set, then known sets only
        let rows = vec![
            at(1, fit as i64, Some(heavy(0..fit))),
            at(2, 1, Some(heavy(fit..fit + 1))),
            at(3, 3, Some(heavy(0..3))),
        ];
        let outcome = validate_group(rows, None);
        // THEN only the row that would overflow the item is rejected, with its own code
        assert_eq!(
            verdicts(&outcome),
            vec![
                (key_at(1), None),
                (key_at(2), Some(ReasonCode::RecordTooLarge)),
                (key_at(3), None),
            ]
        );
        // AND the same holds for an existing record that is already near the limit
        let existing = record(fit as i64, Some(heavy(0..fit)), AggregatedStatus::Pending);
        let late = validate_group(vec![at(4, 1, Some(heavy(fit..fit + 1)))], Some(&existing));
        assert_eq!(
            verdicts(&late),
            vec![(key_at(4), Some(ReasonCode::RecordTooLarge))]
        );
    }

    #[test]
    fn too_many_allocations_rejects_only_rows_that_do_not_fit() {
        // GIVEN an existing record with 2,000 tag sets
        let existing = record(2_000, Some(many(0..2_000, 1)), AggregatedStatus::Pending);
        // WHEN late rows bring 400 new sets, then 200 more (2,600 > 2,500), then
        // a row reusing known sets, then one whose 100 sets exactly reach the limit
        let rows = vec![
            at(1, 400, Some(many(2_000..2_400, 1))),
            at(2, 200, Some(many(2_400..2_600, 1))),
            at(3, 10, Some(many(0..10, 1))),
            at(4, 100, Some(many(2_400..2_500, 1))),
        ];
        let outcome = validate_group(rows, Some(&existing));
        // THEN only the row that would overflow the count is rejected
        assert_eq!(
            verdicts(&outcome),
            vec![
                (key_at(1), None),
                (key_at(2), Some(ReasonCode::TooManyAllocations)),
                (key_at(3), None),
                (key_at(4), None),
            ]
        );
        // AND without the existing record every row fits
        let fresh = validate_group(vec![at(1, 2_500, Some(many(0..2_500, 1)))], None);
        assert!(fresh.rejected.is_empty());
        let over = validate_group(vec![at(1, 2_501, Some(many(0..2_501, 1)))], None);
        assert_eq!(over.rejected[0].reason, ReasonCode::TooManyAllocations);
    }

    #[test]
    fn a_row_repeating_a_tag_set_counts_it_once() {
        let mut allocations = many(0..2_500, 1);
        allocations.push(Allocation {
            quantity: 1,
            tags: vec![Tag {
                key: "team".to_string(),
                value: "t0".to_string(),
            }],
        });
        let outcome = validate_group(vec![at(1, 2_501, Some(allocations))], None);
        assert!(outcome.rejected.is_empty());
    }

    #[test]
    fn screen_group_partitions_every_row() {
        let mut foreign = row_at("requests", "2026-11-30T09:59:59Z", "1");
        foreign.attrs.insert(
            attr::DIMENSION.to_string(),
            s("requests#2026-11-30T09:00:00Z#x"),
        );
        foreign
            .attrs
            .insert(attr::TIMESTAMP.to_string(), s("2026-11-30T10:00:00Z"));
        foreign.sort_key =
            format!("{ACCOUNT}#requests#2026-11-30T09:00:00Z#x#2026-11-30T10:00:00Z");
        let rows = vec![
            row_at("requests", &ts(5), "3"),
            row_at("requests", &ts(1), "-1"),
            row_at("requests", &ts(2), "4"),
            foreign.clone(),
        ];
        let screened = screen_group(&group_key(), &rows, None, &ctx());
        let accepted: Vec<&str> = screened
            .outcome
            .accepted
            .iter()
            .map(|r| r.sort_key.as_str())
            .collect();
        assert_eq!(accepted, vec![key_at(2).as_str(), key_at(5).as_str()]);
        assert_eq!(
            screened.outcome.rejected,
            vec![RejectedRow {
                sort_key: key_at(1),
                reason: ReasonCode::NegativeQuantity
            }]
        );
        assert_eq!(screened.other_group, vec![foreign.sort_key]);
        let pair: (String, ReasonCode) = screened.outcome.rejected[0].clone().into();
        assert_eq!(pair.1, ReasonCode::NegativeQuantity);
        assert!(row_in_group(&screened.outcome.accepted[0], &group_key()));
        assert_eq!(HourBucket::containing(instant(&ts(2))), group_key().hour);
    }

    fn arb_group_row() -> impl Strategy<Value = ValidUsageRow> {
        (0u32..60, 0i64..4, prop::option::of(0usize..3)).prop_map(|(second, quantity, team)| {
            let mut row = at(second, quantity, None);
            row.allocations = team.map(|t| many(t..t + 1, quantity));
            row
        })
    }

    proptest! {
        /// Every row gets exactly one verdict, whatever the order it was read in.
        #[test]
        fn group_verdict_is_a_partition_and_order_independent(
            mut rows in proptest::collection::vec(arb_group_row(), 0..20),
            record_mode in prop::option::of(prop::bool::ANY),
        ) {
            for (i, row) in rows.iter_mut().enumerate() {
                row.sort_key = format!("{}#{i}", row.sort_key);
            }
            let existing = record_mode.map(|tagged_record| {
                if tagged_record { record(5, tagged(5, "t0"), AggregatedStatus::Pending) }
                else { record(5, None, AggregatedStatus::Pending) }
            });
            let outcome = validate_group(rows.clone(), existing.as_ref());
            prop_assert_eq!(outcome.accepted.len() + outcome.rejected.len(), rows.len());
            let mut reversed = rows.clone();
            reversed.reverse();
            let again = validate_group(reversed, existing.as_ref());
            prop_assert_eq!(verdicts(&again), verdicts(&outcome));
            // What is accepted never mixes non-zero modes (the record's included).
            let modes: std::collections::HashSet<AllocationMode> = outcome.accepted.iter()
                .filter_map(AllocationMode::of_row)
                .chain(existing.iter().filter_map(AllocationMode::of_record))
                .collect();
            prop_assert!(modes.len() <= 1);
        }
    }
}
