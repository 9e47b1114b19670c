//! A simple in-memory Marketplace `BatchMeterUsage` (first write wins, entitlements).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::model::{Allocation, GroupKey};
use crate::ports::{MeteringApi, MeteringError, MeteringRecord, RecordVerdict, UnclearAnswer};
use crate::sync::lock;

/// Most records `BatchMeterUsage` takes in one call.
pub const MAX_RECORDS_PER_BATCH: usize = 25;

/// What the in-memory Marketplace billed for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Billed quantity (the first write's).
    pub quantity: i64,
    /// Billed allocations.
    pub allocations: Option<Vec<Allocation>>,
    /// Product of the record.
    pub product_code: String,
    /// The record id returned.
    pub metering_record_id: String,
}

#[derive(Debug, Default)]
struct MeteringState {
    entitled: BTreeSet<(String, String)>,
    ledger: BTreeMap<GroupKey, LedgerEntry>,
    rejected_dimensions: BTreeMap<String, String>,
    /// The next calls' scripted answers, in order: an error, or `None` (answer as usual).
    next_errors: VecDeque<Option<MeteringError>>,
    /// The next answered calls' unclear answers, in order: how many of the call's
    /// last records, and why.
    unclear: VecDeque<(usize, UnclearAnswer)>,
    calls: Vec<Vec<MeteringRecord>>,
    issued_ids: u64,
}

/// A simple in-memory `BatchMeterUsage` for use-case tests (the wire-level simulator is
/// `awsmp-marketplace-sim`). Per record, in order:
/// - license/account not entitled -> `CustomerNotSubscribed`;
/// - first record for its (account, license, dimension, hour) -> billed, `Success`;
/// - same group again with the same quantity and allocations -> `Success` with the
///   original record id (an identical retry);
/// - same group with a different quantity -> `DuplicateRecord` (first write wins).
///
/// Request-level errors, before any record is billed: errors queued with
/// [`MemoryMeteringApi::fail_next`] or [`MemoryMeteringApi::fail_after`]; more than 25 records (`ValidationException`); any
/// record whose dimension was set up with [`MemoryMeteringApi::reject_dimension`].
/// Answers that leave records unclear, after the call is processed as usual: queued
/// with [`MemoryMeteringApi::answer_unclearly`].
/// No timestamp window or throttling rules: the simulator has those.
#[derive(Debug, Clone, Default)]
pub struct MemoryMeteringApi {
    state: Arc<Mutex<MeteringState>>,
}

impl MemoryMeteringApi {
    /// A Marketplace with no entitlements.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entitles a license/account pair.
    pub fn entitle(&self, license_arn: &str, account: &str) {
        lock(&self.state)
            .entitled
            .insert((license_arn.to_string(), account.to_string()));
    }

    /// Removes an entitlement.
    pub fn revoke(&self, license_arn: &str, account: &str) {
        lock(&self.state)
            .entitled
            .remove(&(license_arn.to_string(), account.to_string()));
    }

    /// Fails every batch containing `dimension` with the request-level validation
    /// exception `exception` (e.g. `InvalidUsageDimensionException`).
    pub fn reject_dimension(&self, dimension: &str, exception: &str) {
        lock(&self.state)
            .rejected_dimensions
            .insert(dimension.to_string(), exception.to_string());
    }

    /// Accepts `dimension` again (the seller defined it in the catalog).
    pub fn accept_dimension(&self, dimension: &str) {
        lock(&self.state).rejected_dimensions.remove(dimension);
    }

    /// Makes the next call fail with `error` (queued, one-shot).
    pub fn fail_next(&self, error: MeteringError) {
        lock(&self.state).next_errors.push_back(Some(error));
    }

    /// Lets the next `answered` calls through as usual, then fails the one after with
    /// `error` (queued behind what is already scripted).
    pub fn fail_after(&self, answered: usize, error: MeteringError) {
        let mut state = lock(&self.state);
        state
            .next_errors
            .extend(std::iter::repeat_n(None, answered).chain([Some(error)]));
    }

    /// Processes the next answered call as usual (billing included), then answers its
    /// last `records` records [`RecordVerdict::Ambiguous`] with `why`: what the
    /// adapter makes of an answer that omits a record, gives it an unknown status or
    /// echoes another record (the simulator's `omit_results`, `unknown_status` and
    /// `wrong_echo` faults). Queued, one call each.
    pub fn answer_unclearly(&self, records: usize, why: UnclearAnswer) {
        lock(&self.state).unclear.push_back((records, why));
    }

    /// What was billed, per group.
    pub fn ledger(&self) -> BTreeMap<GroupKey, LedgerEntry> {
        lock(&self.state).ledger.clone()
    }

    /// Every batch received, in order (failed ones included).
    pub fn calls(&self) -> Vec<Vec<MeteringRecord>> {
        lock(&self.state).calls.clone()
    }
}

#[async_trait]
impl MeteringApi for MemoryMeteringApi {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let mut state = lock(&self.state);
        state.calls.push(records.to_vec());
        if let Some(Some(error)) = state.next_errors.pop_front() {
            return Err(error);
        }
        if records.len() > MAX_RECORDS_PER_BATCH {
            return Err(MeteringError::Validation {
                name: "ValidationException".to_string(),
                message: format!(
                    "UsageRecords has {} records; at most {MAX_RECORDS_PER_BATCH} are allowed",
                    records.len()
                ),
            });
        }
        if let Some((dimension, exception)) = records.iter().find_map(|r| {
            state
                .rejected_dimensions
                .get_key_value(&r.key.dimension)
                .map(|(d, e)| (d.clone(), e.clone()))
        }) {
            return Err(MeteringError::Validation {
                name: exception,
                message: format!("the usage dimension {dimension:?} is not valid for the product"),
            });
        }
        let mut verdicts = Vec::with_capacity(records.len());
        for record in records {
            let entitled = state.entitled.contains(&(
                record.key.license_arn.clone(),
                record.key.customer_aws_account_id.clone(),
            ));
            if !entitled {
                verdicts.push(RecordVerdict::CustomerNotSubscribed);
                continue;
            }
            let verdict = match state.ledger.get(&record.key) {
                Some(billed)
                    if billed.quantity == record.quantity
                        && billed.allocations == record.allocations =>
                {
                    RecordVerdict::Success {
                        metering_record_id: billed.metering_record_id.clone(),
                    }
                }
                Some(billed) => RecordVerdict::DuplicateRecord {
                    metering_record_id: Some(billed.metering_record_id.clone()),
                },
                None => {
                    state.issued_ids += 1;
                    let id = format!("mr-{:08}", state.issued_ids);
                    state.ledger.insert(
                        record.key.clone(),
                        LedgerEntry {
                            quantity: record.quantity,
                            allocations: record.allocations.clone(),
                            product_code: record.product_code.clone(),
                            metering_record_id: id.clone(),
                        },
                    );
                    RecordVerdict::Success {
                        metering_record_id: id,
                    }
                }
            };
            verdicts.push(verdict);
        }
        if let Some((records, why)) = state.unclear.pop_front() {
            let from = verdicts.len().saturating_sub(records);
            for verdict in verdicts.iter_mut().skip(from) {
                *verdict = RecordVerdict::Ambiguous { why: why.clone() };
            }
        }
        Ok(verdicts)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    #[tokio::test]
    async fn metering_api_is_first_write_wins_with_entitlements_and_injected_errors() {
        let api = MemoryMeteringApi::new();
        api.entitle(LICENSE, ACCOUNT);
        let rec = |dimension: &str, quantity: i64| MeteringRecord {
            key: group(dimension, "2026-11-30T10"),
            product_code: "prod".into(),
            quantity,
            allocations: None,
        };
        let mut stranger = rec("requests", 1);
        stranger.key.customer_aws_account_id = "999988887777".into();
        let verdicts = api
            .batch_meter_usage(&[rec("requests", 5), stranger])
            .await
            .unwrap();
        let RecordVerdict::Success { metering_record_id } = &verdicts[0] else {
            panic!("{verdicts:?}")
        };
        assert_eq!(verdicts[1], RecordVerdict::CustomerNotSubscribed);
        // An identical retry succeeds with the same id; a different quantity is a duplicate.
        let again = api
            .batch_meter_usage(&[rec("requests", 5), rec("requests", 6)])
            .await
            .unwrap();
        assert_eq!(
            again[0],
            RecordVerdict::Success {
                metering_record_id: metering_record_id.clone()
            }
        );
        assert_eq!(
            again[1],
            RecordVerdict::DuplicateRecord {
                metering_record_id: Some(metering_record_id.clone())
            }
        );
        assert_eq!(
            api.ledger()[&group("requests", "2026-11-30T10")].quantity,
            5
        );

        api.reject_dimension("bogus", "InvalidUsageDimensionException");
        let err = api
            .batch_meter_usage(&[rec("ok", 1), rec("bogus", 1)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, MeteringError::Validation { ref name, .. } if name == "InvalidUsageDimensionException")
        );
        assert!(
            !api.ledger().contains_key(&group("ok", "2026-11-30T10")),
            "nothing billed from a failed batch"
        );
        api.fail_next(MeteringError::Throttled("slow down".into()));
        assert_eq!(
            api.batch_meter_usage(&[rec("ok", 1)]).await,
            Err(MeteringError::Throttled("slow down".into()))
        );
        let too_many: Vec<_> = (0..26).map(|i| rec(&format!("d{i}"), 1)).collect();
        assert!(matches!(
            api.batch_meter_usage(&too_many).await,
            Err(MeteringError::Validation { .. })
        ));
        assert_eq!(api.calls().len(), 5);
        // An unclear answer: processed (billed) as usual, then the last record unclear.
        api.answer_unclearly(1, UnclearAnswer::Missing);
        let unclear = api
            .batch_meter_usage(&[rec("a", 1), rec("b", 2)])
            .await
            .unwrap();
        assert!(matches!(unclear[0], RecordVerdict::Success { .. }));
        assert_eq!(
            unclear[1],
            RecordVerdict::Ambiguous {
                why: UnclearAnswer::Missing
            }
        );
        assert_eq!(api.ledger()[&group("b", "2026-11-30T10")].quantity, 2);
        api.revoke(LICENSE, ACCOUNT);
        assert_eq!(
            api.batch_meter_usage(&[rec("ok", 1)]).await.unwrap(),
            vec![RecordVerdict::CustomerNotSubscribed]
        );
    }
}
