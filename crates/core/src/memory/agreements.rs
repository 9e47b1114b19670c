//! [`AgreementApi`] in memory: seeded agreements, answered as the Agreement API
//! answers the seller, with one-shot failures ([`AgreementOp`], `fail_next`) for the
//! error paths (a throttled search, a role without `GetAgreementTerms`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{
    AgreementApi, AgreementEntitlement, AgreementError, AgreementFacts, AgreementSearch,
    AgreementSummary, AgreementTerms, DESCRIBE_AGREEMENT, GET_AGREEMENT_ENTITLEMENTS,
    GET_AGREEMENT_TERMS, PortError, SEARCH_AGREEMENTS,
};
use crate::sync::lock;
use crate::time::Instant;

/// One agreement as the memory API holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementRecord {
    /// What `describe` answers.
    pub facts: AgreementFacts,
    /// What `terms` answers.
    pub terms: AgreementTerms,
    /// What `entitlements` answers; their license ARNs are what `search` lists and
    /// filters by.
    pub entitlements: Vec<AgreementEntitlement>,
    /// `lastUpdateTime`.
    pub last_update_time: Instant,
}

/// A method of [`AgreementApi`], for [`MemoryAgreementApi::fail_next`] and
/// [`MemoryAgreementApi::calls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgreementOp {
    /// [`AgreementApi::describe`].
    Describe,
    /// [`AgreementApi::terms`].
    Terms,
    /// [`AgreementApi::entitlements`].
    Entitlements,
    /// [`AgreementApi::search`].
    Search,
}

impl AgreementOp {
    /// The API operation (and IAM action) it calls.
    pub fn operation(self) -> &'static str {
        match self {
            AgreementOp::Describe => DESCRIBE_AGREEMENT,
            AgreementOp::Terms => GET_AGREEMENT_TERMS,
            AgreementOp::Entitlements => GET_AGREEMENT_ENTITLEMENTS,
            AgreementOp::Search => SEARCH_AGREEMENTS,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    agreements: BTreeMap<String, AgreementRecord>,
    faults: HashMap<AgreementOp, VecDeque<AgreementError>>,
    calls: HashMap<AgreementOp, usize>,
}

/// [`AgreementApi`] over seeded [`AgreementRecord`]s. A cheap `Clone` handle on
/// shared state: give one clone to the code under test, seed and inspect through
/// another.
#[derive(Debug, Clone, Default)]
pub struct MemoryAgreementApi {
    state: Arc<Mutex<State>>,
}

impl MemoryAgreementApi {
    /// An API that knows no agreement.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `record` (replacing one with the same id, as an amendment does).
    pub fn seed(&self, record: AgreementRecord) {
        lock(&self.state)
            .agreements
            .insert(record.facts.agreement_id.clone(), record);
    }

    /// Changes a held agreement in place; `false` when it is not held.
    pub fn update(&self, agreement_id: &str, change: impl FnOnce(&mut AgreementRecord)) -> bool {
        match lock(&self.state).agreements.get_mut(agreement_id) {
            Some(record) => {
                change(record);
                true
            }
            None => false,
        }
    }

    /// The held agreement, if any.
    pub fn get(&self, agreement_id: &str) -> Option<AgreementRecord> {
        lock(&self.state).agreements.get(agreement_id).cloned()
    }

    /// Fails the next call of `op` with `error` (queued: several fire in order).
    pub fn fail_next(&self, op: AgreementOp, error: AgreementError) {
        lock(&self.state)
            .faults
            .entry(op)
            .or_default()
            .push_back(error);
    }

    /// Fails the next call of `op` as a `ThrottlingException` does.
    pub fn throttle_next(&self, op: AgreementOp) {
        self.fail_next(
            op,
            AgreementError::Port(PortError::Transient {
                operation: op.operation(),
                message: "ThrottlingException: Rate exceeded".into(),
            }),
        );
    }

    /// How many times `op` was called (failed calls included).
    pub fn calls(&self, op: AgreementOp) -> usize {
        lock(&self.state).calls.get(&op).copied().unwrap_or(0)
    }

    /// Counts the call, then fails it if a failure is queued for `op`.
    fn enter(&self, op: AgreementOp) -> Result<(), AgreementError> {
        let mut state = lock(&self.state);
        *state.calls.entry(op).or_default() += 1;
        match state.faults.get_mut(&op).and_then(VecDeque::pop_front) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn held(&self, op: AgreementOp, agreement_id: &str) -> Result<AgreementRecord, AgreementError> {
        self.get(agreement_id)
            .ok_or_else(|| AgreementError::NotFound {
                operation: op.operation(),
                agreement_id: agreement_id.to_string(),
            })
    }
}

fn matches(record: &AgreementRecord, filter: &AgreementSearch) -> bool {
    let license = filter.license_arn.as_ref().is_none_or(|arn| {
        record
            .entitlements
            .iter()
            .any(|e| e.license_arn.as_ref() == Some(arn))
    });
    let status = filter
        .status
        .as_ref()
        .is_none_or(|s| *s == record.facts.status);
    let updated = filter
        .updated_after
        .is_none_or(|after| record.last_update_time >= after);
    let product = filter
        .product_id
        .as_ref()
        .is_none_or(|p| record.facts.product_id.as_ref() == Some(p));
    license && status && updated && product
}

fn summary(record: &AgreementRecord) -> AgreementSummary {
    let facts = &record.facts;
    AgreementSummary {
        agreement_id: facts.agreement_id.clone(),
        status: facts.status.clone(),
        acceptor_account_id: facts.acceptor_account_id.clone(),
        start: facts.start,
        end: facts.end,
        license_arns: record
            .entitlements
            .iter()
            .filter_map(|e| e.license_arn.clone())
            .collect(),
        last_update_time: Some(record.last_update_time),
        initial_agreement_id: facts.initial_agreement_id.clone(),
    }
}

#[async_trait]
impl AgreementApi for MemoryAgreementApi {
    async fn describe(&self, agreement_id: &str) -> Result<Option<AgreementFacts>, AgreementError> {
        self.enter(AgreementOp::Describe)?;
        Ok(self.get(agreement_id).map(|record| record.facts))
    }

    async fn terms(&self, agreement_id: &str) -> Result<AgreementTerms, AgreementError> {
        self.enter(AgreementOp::Terms)?;
        Ok(self.held(AgreementOp::Terms, agreement_id)?.terms)
    }

    async fn entitlements(
        &self,
        agreement_id: &str,
    ) -> Result<Vec<AgreementEntitlement>, AgreementError> {
        self.enter(AgreementOp::Entitlements)?;
        Ok(self
            .held(AgreementOp::Entitlements, agreement_id)?
            .entitlements)
    }

    async fn search(
        &self,
        filter: &AgreementSearch,
    ) -> Result<Vec<AgreementSummary>, AgreementError> {
        self.enter(AgreementOp::Search)?;
        Ok(lock(&self.state)
            .agreements
            .values()
            .filter(|record| matches(record, filter))
            .map(summary)
            .collect())
    }
}
