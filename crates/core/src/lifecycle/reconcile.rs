//! The agreement reconciliation (events stack, daily, and `awsmp subscribers reconcile`):
//! the Agreement API is the source of truth when a Marketplace event was lost. Every
//! purchase agreement of the seller's products is read (`SearchAgreements`) and held
//! against the subscribers table, license by license:
//!
//! | the API says | the row says | what a lost event explains | repair |
//! |---|---|---|---|
//! | an agreement `ACTIVE` and started | no row, or no subscription status | `License Updated` lost | `License Updated` at the agreement's start |
//! | an agreement `ACTIVE` and started | active on another agreement | the replacement's `License Updated` lost | `License Updated` at its start (applies only if newer than the row's last event) |
//! | no agreement active, the latest ended at T | subscription active | `License Deprovisioned` lost | `License Deprovisioned` at T: the window until T + 1 h reopens if it has not passed; otherwise the row is closed in the same write (nothing back-dated into a flush that can no longer bill) |
//! | no agreement active, the latest ended at T | that agreement active | `Purchase Agreement Ended` lost | `Purchase Agreement Ended` at T |
//! | an agreement `ACTIVE` | deprovisioning or inactive, or that agreement ended | nothing an event explains | reported, never reactivated |
//!
//! Repairs are synthetic events applied with the lifecycle's own transitions
//! ([`super::apply`]) at the version read ([`super::subscribers::update_subscriber`]),
//! so they are idempotent, ordered by time against the real events (a late real event
//! still applies on top) and never earlier than the event they stand for could have
//! happened: an agreement cannot be active before it starts, nor deprovisioned before it
//! ended. T is the agreement's end when it has passed, else its `lastUpdateTime` (the
//! API does not say when a cancelled pay-as-you-go agreement ended).
//!
//! Each run then keeps the active licenses' rate cards on their rows ([`rate_cards`]).
//!
//! Not reconciled: a row no agreement of the products names (the search starts from the
//! API; finding those needs a table scan), and a row of an agreement that ended before
//! this stack ever saw it (no row: nothing to bill, nothing reported).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::lifecycle::{
    DEPROVISIONING_WINDOW, MarketplaceEvent, Transition, apply, expire_deprovisioning,
    normalize_license_arn,
};
use crate::model::{AgreementStatus as RowAgreement, Subscriber, SubscriptionStatus};
use crate::ports::{
    AgreementApi, AgreementError, AgreementSearch, AgreementStatus, AgreementSummary, Clock,
    SubscriberStore,
};
use crate::time::{Instant, format_instant};

use super::subscribers::{Decision, UpdateError, Updated, update_subscriber};
use rate_cards::RateCardReport;

/// Most write attempts per row when the real events keep moving its version.
pub const MAX_WRITE_ATTEMPTS: usize = 5;

/// One product whose agreements are reconciled: the Agreement API names it by its
/// product id, the rows and the Metering API by its product code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Product {
    /// `prod-...` (`SearchAgreements`' `ResourceIdentifier`).
    pub product_id: String,
    /// The product code the repaired rows carry.
    pub product_code: String,
}

/// What one reconciliation run reads and whether it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileSettings {
    /// The products (at least one).
    pub products: Vec<Product>,
    /// Report what would be repaired, write nothing.
    pub dry_run: bool,
}

/// The external services the reconciliation uses.
#[derive(Clone, Copy)]
pub struct ReconcilePorts<'a> {
    /// The Agreement API (us-east-1).
    pub agreements: &'a dyn AgreementApi,
    /// The subscribers table.
    pub subscribers: &'a dyn SubscriberStore,
    /// Now, and each write's stamp.
    pub clock: &'a dyn Clock,
}

/// What disagreed between the API and a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum DriftKind {
    /// An active, started agreement whose license has no active row.
    LicenseUpdatedLost,
    /// The row is active on another agreement than the API's active one.
    ReplacementLost,
    /// The row is still subscribed while no agreement of its license is active.
    DeprovisioningLost,
    /// The row's agreement is still active while the API says it ended.
    AgreementEndLost,
    /// The API says active while the row says deprovisioning, inactive or ended: no
    /// lost event explains it, and a license is never reactivated.
    StatusesDisagree,
    /// The row could not be read (the table failed): compared by the next run.
    RowUnread,
}

/// What the run did about a drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum DriftAction {
    /// The repair was written.
    Repaired,
    /// The repair was written and closed the row at once: the final-usage window the
    /// lost deprovisioning opened had already passed.
    RepairedAndClosed,
    /// `--dry-run`: this repair would be written.
    WouldRepair,
    /// Reported only: nothing a lost event would have done applies (or a newer event
    /// already decided the row).
    Reported,
    /// The repair could not be written (the table failed, or the row kept changing);
    /// the next run tries again.
    Failed,
}

/// One license whose row disagrees with the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// What disagreed.
    pub kind: DriftKind,
    /// What the run did.
    pub action: DriftAction,
    /// The license.
    pub license_arn: String,
    /// The buyer.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The agreement the API answered for it.
    pub agreement_id: String,
    /// The instant the repair's event is dated (RFC 3339).
    pub event_time: Option<String>,
    /// Why, in words.
    pub detail: String,
    /// A license with no row whose window had passed ([`ReconcileReport::backfilled`]).
    #[serde(skip)]
    pub backfill: bool,
}

/// What one run found (the function's answer, the CLI's `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// The instant the run compared with.
    pub now: String,
    /// Whether it wrote nothing.
    pub dry_run: bool,
    /// Agreements read.
    pub agreements: usize,
    /// Licenses (per buyer account) compared.
    pub licenses: usize,
    /// Licenses whose row agrees.
    pub in_sync: usize,
    /// Licenses whose agreements have not started yet.
    pub scheduled: usize,
    /// Licenses whose agreements all ended, whose final-usage window has passed and
    /// that had no row (neither of their events ever arrived, or they ended before the
    /// stack was deployed): given the closed row their events would have left, so the
    /// entitlement answer knows them. Not drift: the first run backfills every one.
    pub backfilled: usize,
    /// Every disagreement, in license order.
    pub drifts: Vec<Drift>,
    /// The rate cards kept on the rows ([`rate_cards`]).
    pub rate_cards: RateCardReport,
}

impl ReconcileReport {
    /// Drifts the run repaired (or would, dry).
    pub fn repaired(&self) -> usize {
        self.count(|a| {
            matches!(
                a,
                DriftAction::Repaired | DriftAction::RepairedAndClosed | DriftAction::WouldRepair
            )
        })
    }

    /// Drifts left for a person (reported) or for the next run (failed).
    pub fn unresolved(&self) -> usize {
        self.unresolved_drifts().count()
    }

    /// The drifts [`ReconcileReport::unresolved`] counts.
    pub fn unresolved_drifts(&self) -> impl Iterator<Item = &Drift> {
        self.drifts
            .iter()
            .filter(|d| matches!(d.action, DriftAction::Reported | DriftAction::Failed))
    }

    fn count(&self, which: impl Fn(DriftAction) -> bool) -> usize {
        self.drifts.iter().filter(|d| which(d.action)).count()
    }
}

/// Why a run could not compare at all (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// No product to reconcile.
    #[error("no product to reconcile: name at least one product id and its product code")]
    NoProduct,
    /// `SearchAgreements` failed.
    #[error("reading the agreements of product {product_id}: {source}")]
    Search {
        /// The product.
        product_id: String,
        /// The API's error.
        source: AgreementError,
    },
}

/// One license of one buyer, with every agreement the API lists for it.
struct License<'a> {
    license_arn: String,
    account: String,
    product_code: &'a str,
    agreements: Vec<&'a AgreementSummary>,
}

impl License<'_> {
    /// The agreement the license is active on now, as the API says: the latest
    /// started `ACTIVE` one.
    fn started_active(&self, now: Instant) -> Option<&AgreementSummary> {
        self.agreements
            .iter()
            .copied()
            .filter(|a| a.status == AgreementStatus::Active && a.start <= now)
            .max_by(|a, b| (a.start, &a.agreement_id).cmp(&(b.start, &b.agreement_id)))
    }
}

/// Reads every agreement of `settings.products` and repairs (or, dry, reports) each
/// row a lost event left behind. A row that fails to write is a [`DriftAction::Failed`]
/// drift, not an error: the others are still compared.
pub async fn reconcile(
    ports: ReconcilePorts<'_>,
    settings: &ReconcileSettings,
) -> Result<ReconcileReport, ReconcileError> {
    if settings.products.is_empty() {
        return Err(ReconcileError::NoProduct);
    }
    let now = crate::pipeline::now_from_event(None, ports.clock);
    let mut read: Vec<(&Product, Vec<AgreementSummary>)> = Vec::new();
    for product in &settings.products {
        let filter = AgreementSearch {
            product_id: Some(product.product_id.clone()),
            ..AgreementSearch::default()
        };
        let found =
            ports
                .agreements
                .search(&filter)
                .await
                .map_err(|source| ReconcileError::Search {
                    product_id: product.product_id.clone(),
                    source,
                })?;
        read.push((product, found));
    }
    let mut licenses: BTreeMap<(String, String), License<'_>> = BTreeMap::new();
    for (product, found) in &read {
        for agreement in found {
            for arn in &agreement.license_arns {
                let license_arn = normalize_license_arn(arn);
                let key = (license_arn.clone(), agreement.acceptor_account_id.clone());
                licenses
                    .entry(key)
                    .or_insert_with(|| License {
                        license_arn,
                        account: agreement.acceptor_account_id.clone(),
                        product_code: &product.product_code,
                        agreements: Vec::new(),
                    })
                    .agreements
                    .push(agreement);
            }
        }
    }
    let mut report = ReconcileReport {
        now: format_instant(now),
        dry_run: settings.dry_run,
        agreements: read.iter().map(|(_, found)| found.len()).sum(),
        licenses: licenses.len(),
        in_sync: 0,
        scheduled: 0,
        backfilled: 0,
        drifts: Vec::new(),
        rate_cards: RateCardReport::default(),
    };
    for license in licenses.values() {
        let checked = Check {
            ports,
            now,
            dry_run: settings.dry_run,
            license,
        };
        match checked.run().await {
            Verdict::InSync => report.in_sync += 1,
            Verdict::Scheduled => report.scheduled += 1,
            Verdict::Drift(drift)
                if drift.backfill
                    && matches!(
                        drift.action,
                        DriftAction::RepairedAndClosed | DriftAction::WouldRepair
                    ) =>
            {
                report.backfilled += 1;
            }
            Verdict::Drift(drift) => {
                tracing::warn!(
                    license = %drift.license_arn,
                    account = %drift.customer_aws_account_id,
                    agreement = %drift.agreement_id,
                    kind = ?drift.kind,
                    action = ?drift.action,
                    detail = %drift.detail,
                    "subscriber row disagrees with the Agreement API"
                );
                report.drifts.push(drift);
            }
        }
    }
    let due = licenses
        .values()
        .filter_map(|license| {
            license.started_active(now).map(|active| rate_cards::Due {
                license_arn: &license.license_arn,
                account: &license.account,
                active,
            })
        })
        .collect();
    report.rate_cards = rate_cards::refresh(ports, now, settings.dry_run, due).await;
    Ok(report)
}

enum Verdict {
    InSync,
    Scheduled,
    Drift(Drift),
}

/// The events a repair applies, in order, and the instant they are dated.
struct Repair {
    kind: DriftKind,
    agreement_id: String,
    time: Instant,
    events: Vec<MarketplaceEvent>,
    /// Close the row in the same write when the reopened window has passed.
    close_if_past: bool,
    /// The license had no row and its window has passed.
    backfill: bool,
    detail: String,
}

struct Check<'a> {
    ports: ReconcilePorts<'a>,
    now: Instant,
    dry_run: bool,
    license: &'a License<'a>,
}

impl Check<'_> {
    async fn run(&self) -> Verdict {
        let row = match self
            .ports
            .subscribers
            .get(&self.license.license_arn, &self.license.account)
            .await
        {
            Ok(row) => row,
            Err(e) => {
                let agreement = self
                    .license
                    .agreements
                    .first()
                    .map(|a| a.agreement_id.as_str());
                return Verdict::Drift(self.drift(
                    DriftKind::RowUnread,
                    DriftAction::Failed,
                    agreement.unwrap_or_default(),
                    None,
                    format!("the row could not be read: {e}"),
                ));
            }
        };
        match self.plan(row.as_ref()) {
            Planned::Verdict(verdict) => verdict,
            Planned::Repair(repair) => self.repair(row, repair).await,
        }
    }

    /// What the API's agreements mean for this row.
    fn plan(&self, row: Option<&Subscriber>) -> Planned {
        let now = self.now;
        let agreements = &self.license.agreements;
        if let Some(active) = self.license.started_active(now) {
            return self.plan_active(row, active);
        }
        if agreements
            .iter()
            .any(|a| a.status == AgreementStatus::Active)
        {
            return Planned::Verdict(Verdict::Scheduled);
        }
        let ended = agreements
            .iter()
            .filter_map(|a| ended_at(a, now).map(|t| (t, *a)))
            .max_by(|(t1, a1), (t2, a2)| (t1, &a1.agreement_id).cmp(&(t2, &a2.agreement_id)));
        let Some(row) = row else {
            // Both of its events lost: the row they would have made (while its window
            // is open, so the window's usage is flushed; after it, closed at once).
            return match ended {
                Some((time, ended)) => self.plan_ended(None, ended, time),
                None => Planned::Verdict(Verdict::InSync),
            };
        };
        let Some((time, ended)) = ended else {
            // Ended, but the API dates neither its end nor its last change: nothing
            // can be dated, so nothing is repaired.
            return match row.subscription_status {
                Some(SubscriptionStatus::Active) => Planned::Verdict(Verdict::Drift(self.drift(
                    DriftKind::DeprovisioningLost,
                    DriftAction::Reported,
                    &agreements[0].agreement_id,
                    None,
                    "no agreement of the license is active, and the API dates neither its end nor its last change: close it with the Marketplace's own record".into(),
                ))),
                _ => Planned::Verdict(Verdict::InSync),
            };
        };
        self.plan_ended(Some(row), ended, time)
    }

    fn plan_active(&self, row: Option<&Subscriber>, active: &AgreementSummary) -> Planned {
        let id = active.agreement_id.as_str();
        let updated = MarketplaceEvent::LicenseUpdated {
            license_arn: self.license.license_arn.clone(),
            account: self.license.account.clone(),
            product_code: Some(self.license.product_code.to_string()),
            agreement_id: id.to_string(),
            time: whole_seconds(active.start),
        };
        let repair = |kind, detail: String| {
            Planned::Repair(Repair {
                kind,
                agreement_id: id.to_string(),
                time: whole_seconds(active.start),
                events: vec![updated.clone()],
                close_if_past: false,
                backfill: false,
                detail,
            })
        };
        let Some(row) = row.filter(|r| r.subscription_status.is_some()) else {
            return repair(
                DriftKind::LicenseUpdatedLost,
                format!(
                    "agreement {id} is active since {} and the license has no active row",
                    format_instant(active.start)
                ),
            );
        };
        let disagree = |detail: String| {
            Planned::Verdict(Verdict::Drift(self.drift(
                DriftKind::StatusesDisagree,
                DriftAction::Reported,
                id,
                None,
                detail,
            )))
        };
        match row.subscription_status {
            Some(SubscriptionStatus::Active) => {}
            Some(status) => {
                return disagree(format!(
                    "agreement {id} is active but the subscription is {}: a license is never reactivated; check the buyer's agreement in the AWS Marketplace Management Portal",
                    status.as_str()
                ));
            }
            None => {}
        }
        if row.agreement_id.as_deref() != Some(id) {
            let current = row.agreement_id.as_deref().unwrap_or("none");
            return repair(
                DriftKind::ReplacementLost,
                format!("the row is on agreement {current}; the API's active agreement is {id}"),
            );
        }
        if row.agreement_status == Some(RowAgreement::Inactive) {
            return disagree(format!(
                "agreement {id} is active but the row says it ended: an ended agreement is never reactivated"
            ));
        }
        Planned::Verdict(Verdict::InSync)
    }

    fn plan_ended(
        &self,
        row: Option<&Subscriber>,
        ended: &AgreementSummary,
        time: Instant,
    ) -> Planned {
        let id = ended.agreement_id.as_str();
        let empty = Subscriber::new(&self.license.license_arn, &self.license.account);
        let no_row = row.is_none();
        let never_subscribed = row.is_none_or(|r| r.subscription_status.is_none());
        let row = row.unwrap_or(&empty);
        // The row's own agreement, if the API lists it ended (the latest ended one, or
        // one it replaced).
        let row_agreement_end = if never_subscribed {
            // The License Updated it never got names the ended agreement.
            Some((id, time))
        } else {
            row.agreement_id
                .as_deref()
                .filter(|_| row.agreement_status == Some(RowAgreement::Active))
                .and_then(|own| {
                    self.license
                        .agreements
                        .iter()
                        .find(|a| a.agreement_id == own)
                        .and_then(|a| ended_at(a, self.now).map(|t| (own, t)))
                })
        };
        let subscribed = row.subscription_status == Some(SubscriptionStatus::Active);
        let mut events = Vec::new();
        if never_subscribed {
            // Its License Updated was lost too: the license was active from the start.
            events.push(MarketplaceEvent::LicenseUpdated {
                license_arn: self.license.license_arn.clone(),
                account: self.license.account.clone(),
                product_code: Some(self.license.product_code.to_string()),
                agreement_id: id.to_string(),
                time: whole_seconds(ended.start.min(time)),
            });
        }
        if subscribed || never_subscribed {
            events.push(MarketplaceEvent::LicenseDeprovisioned {
                license_arn: self.license.license_arn.clone(),
                account: self.license.account.clone(),
                product_code: Some(self.license.product_code.to_string()),
                agreement_id: id.to_string(),
                time,
            });
        }
        if let Some((own, at)) = row_agreement_end {
            events.push(MarketplaceEvent::AgreementEnded {
                agreement_id: own.to_string(),
                account: self.license.account.clone(),
                time: at,
            });
        }
        if events.is_empty() {
            return Planned::Verdict(Verdict::InSync);
        }
        let (kind, detail) = if never_subscribed {
            (
                DriftKind::DeprovisioningLost,
                format!(
                    "agreement {id} ran from {} to {} ({}) and neither its License Updated nor its License Deprovisioned arrived",
                    format_instant(ended.start),
                    format_instant(time),
                    ended.status
                ),
            )
        } else if subscribed {
            (
                DriftKind::DeprovisioningLost,
                format!(
                    "agreement {id} ended ({}) at {} and the subscription is still active",
                    ended.status,
                    format_instant(time)
                ),
            )
        } else {
            (
                DriftKind::AgreementEndLost,
                format!(
                    "agreement {id} ended ({}) at {} and the row still says it is active",
                    ended.status,
                    format_instant(time)
                ),
            )
        };
        Planned::Repair(Repair {
            kind,
            agreement_id: id.to_string(),
            time,
            events,
            close_if_past: true,
            backfill: no_row && time + DEPROVISIONING_WINDOW <= self.now,
            detail,
        })
    }

    /// Applies (or, dry, plans) the repair's events on the row at the version read.
    async fn repair(&self, row: Option<Subscriber>, repair: Repair) -> Verdict {
        let now = self.now;
        let decide = |current: Option<&Subscriber>| -> Result<(Subscriber, bool), &'static str> {
            let mut next: Option<Subscriber> = None;
            let mut reason = "nothing a lost event would have done applies";
            for event in &repair.events {
                match apply(next.as_ref().or(current), event) {
                    Transition::Write { row, .. } => next = Some(row),
                    other => reason = other.reason(),
                }
            }
            let mut next = next.ok_or(reason)?;
            let mut closed = false;
            let window_passed = repair.time + DEPROVISIONING_WINDOW <= now;
            if repair.close_if_past
                && window_passed
                && let Some(expired) = expire_deprovisioning(&next, now)
            {
                next = expired;
                closed = true;
            }
            Ok((next, closed))
        };
        let time = Some(format_instant(repair.time));
        if self.dry_run {
            let mut drift = match decide(row.as_ref()) {
                Ok(_) => self.drift(
                    repair.kind,
                    DriftAction::WouldRepair,
                    &repair.agreement_id,
                    time,
                    repair.detail,
                ),
                Err(reason) => self.drift(
                    repair.kind,
                    DriftAction::Reported,
                    &repair.agreement_id,
                    time,
                    format!("{}; not repaired: {reason}", repair.detail),
                ),
            };
            drift.backfill = repair.backfill;
            return Verdict::Drift(drift);
        }
        let updated = update_subscriber(
            self.ports.subscribers,
            &|| crate::pipeline::now_from_event(None, self.ports.clock),
            &self.license.license_arn,
            &self.license.account,
            row,
            MAX_WRITE_ATTEMPTS,
            |current: Option<&Subscriber>, _attempt| match decide(current) {
                Ok((next, closed)) => Decision::Write(next, closed),
                Err(reason) => Decision::Done(reason),
            },
        )
        .await;
        let (action, detail) = match updated {
            Ok(Updated::Written(true, _)) => (
                DriftAction::RepairedAndClosed,
                format!(
                    "{}; the final-usage window had passed: closed",
                    repair.detail
                ),
            ),
            Ok(Updated::Written(false, _)) => (DriftAction::Repaired, repair.detail),
            Ok(Updated::Done(reason)) => (
                DriftAction::Reported,
                format!("{}; not repaired: {reason}", repair.detail),
            ),
            Err(UpdateError::Store(e)) => (
                DriftAction::Failed,
                format!("{}; the repair was not written: {e}", repair.detail),
            ),
            Err(UpdateError::Contention { attempts }) => (
                DriftAction::Failed,
                format!(
                    "{}; the row kept changing under {attempts} write attempts",
                    repair.detail
                ),
            ),
        };
        let mut drift = self.drift(repair.kind, action, &repair.agreement_id, time, detail);
        drift.backfill = repair.backfill;
        Verdict::Drift(drift)
    }

    fn drift(
        &self,
        kind: DriftKind,
        action: DriftAction,
        agreement_id: &str,
        event_time: Option<String>,
        detail: String,
    ) -> Drift {
        Drift {
            kind,
            action,
            license_arn: self.license.license_arn.clone(),
            customer_aws_account_id: self.license.account.clone(),
            agreement_id: agreement_id.to_string(),
            event_time,
            detail,
            backfill: false,
        }
    }
}

enum Planned {
    Verdict(Verdict),
    Repair(Repair),
}

/// When an ended agreement ended, as far as the API dates it: its end when that has
/// passed, else its last change. `None` for an active agreement or an undated one.
fn ended_at(agreement: &AgreementSummary, now: Instant) -> Option<Instant> {
    if agreement.status == AgreementStatus::Active {
        return None;
    }
    agreement
        .end
        .filter(|end| *end <= now)
        .or(agreement.last_update_time)
        .map(whole_seconds)
}

/// The lifecycle's guards are whole seconds.
fn whole_seconds(t: Instant) -> Instant {
    use chrono::Timelike;
    t.with_nanosecond(0).unwrap_or(t)
}

pub mod rate_cards;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
