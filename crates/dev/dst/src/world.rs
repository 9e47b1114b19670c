//! What one schedule leaves behind for the checkers ([`crate::check`]): the tables, the
//! Marketplace's ledger, what each actor was answered, and the options it ran with.

use std::sync::Arc;

use awsmp_core::memory::{
    ManualClock, MemoryProfileStore, MemorySubscriberStore, MemoryTables, RecordingMetrics,
};
use awsmp_core::time::Instant;

use crate::actors::buyer_events::BuyerEvents;
use crate::actors::edge_seller::EdgeLog;
use crate::actors::outcome_events::OutcomeEvents;
use crate::executor;
use crate::options::Options;
use crate::ports::FaultyMetering;
use crate::sim::Sim;

/// Everything one schedule built, in one metering Region, for the checkers.
pub struct World {
    /// The simulation context.
    pub sim: Sim,
    /// What the schedule is.
    pub options: Options,
    /// Usage + aggregated tables.
    pub tables: MemoryTables,
    /// Subscribers.
    pub subscribers: MemorySubscriberStore,
    /// Marketplace (its ledger).
    pub metering: Arc<FaultyMetering>,
    /// Time.
    pub clock: ManualClock,
    /// Polls, crashes and unfinished tasks of the concurrent phase.
    pub stats: executor::RunStats,
    /// Sort keys of the rows written before the pipeline ran: every fold of their group
    /// includes them, so none may ever be late usage (`HourAlreadySubmitted`).
    pub initial_rows: Vec<(String, String)>,
    /// Customer profiles the register function wrote.
    pub profiles: MemoryProfileStore,
    /// Each buyer's registration: license and the last HTTP status the page got.
    pub registrations: Vec<(String, u16)>,
    /// Licenses deprovisioned during the run (the others stay active).
    pub deprovisioned: Vec<String>,
    /// Every metric the pipeline's stages emitted.
    pub metrics: RecordingMetrics,
    /// When the last fault could happen (settling began): an hour whose window closes
    /// before the first fault-free run after it may age out without a violation.
    pub faults_end: Instant,
    /// What the seller's service was answered for each usage event it recorded
    /// through the ingestion port: (license, event id, quantity, answer).
    pub ingested: Vec<Event>,
    /// This world's metering Region.
    pub region: &'static str,
    /// This world's product.
    pub product: &'static str,
    /// Each buyer's rate card right after its License Updated was handled (before the
    /// pipeline's first run).
    pub activation_cards: Vec<(String, Option<awsmp_core::charges::StoredRateCard>)>,
    /// The first buyer's rate card right after its `Purchase Agreement Amended` was
    /// handled (settling's start).
    pub amended_card: Option<awsmp_core::charges::StoredRateCard>,
    /// Each run of the agreement reconciliation: its report, or why it could not compare.
    pub reconciliations: Vec<Result<awsmp_core::lifecycle::reconcile::ReconcileReport, String>>,
    /// The second main stack's world, when the schedule deploys one.
    pub second: Option<Box<World>>,
    /// The usage files the operator imported.
    pub imports: Vec<Import>,
    /// The bodies left in this Region's queues.
    pub queued: Vec<String>,
    /// The bodies in this Region's dead-letter queues.
    pub dead_letters: Vec<String>,
    /// [`crate::scenario::GARBAGE`] was sent to the work queue.
    pub garbage_sent: bool,
    /// The outcome-events function over this world's tables' streams, if it ran.
    pub outcomes: Option<OutcomeEvents>,
    /// The buyer-events function over the subscribers table's stream, if it ran (the
    /// first Region's world: the table is the events stack's).
    pub buyer_events: Option<BuyerEvents>,
    /// What the usage API answered the seller posting across the edges of time.
    pub edges: EdgeLog,
    /// What the seller's service was answered asking `GET /subscriptions` (the first
    /// Region's world).
    pub gates: Vec<crate::actors::gatekeeper::Asked>,
    /// Each discoverer run's report.
    pub discoveries: Vec<awsmp_core::discover::DiscoverReport>,
}

impl World {
    /// A direct-submit stack: the seller wrote the aggregated records (no raw rows).
    pub fn direct(&self) -> bool {
        self.options.settings.direct
    }

    /// A dry run (`METERING_MODE=dry-run`): whether the buyer's account is on its
    /// allowlist. `None`: live.
    pub fn dry_run(&self) -> Option<bool> {
        self.options.settings.dry_run
    }
}

/// One usage file the operator imported with `usage import`.
#[derive(Debug, Clone)]
pub struct Import {
    /// The Region of the one deployment it was imported into.
    pub region: &'static str,
    /// That deployment's product.
    pub product: &'static str,
    /// Its lines: license, event id, quantity.
    pub lines: Vec<(String, String, i64)>,
    /// An import of it reported done (every line written or already written).
    pub done: bool,
    /// The deployment refused raw usage (direct-submit): nothing may be written.
    pub refused: bool,
}

/// One usage event the seller's service recorded, and the answer it got.
#[derive(Debug, Clone)]
pub struct Event {
    /// License.
    pub license: String,
    /// Its event id as stored: the id sent, or a CloudEvent's key (its source and id).
    pub event_id: String,
    /// Quantity.
    pub quantity: i64,
    /// The `team` tag its whole quantity is allocated to, if any.
    pub team: Option<&'static str>,
    /// The answer.
    pub answer: Ingested,
}

/// The answer an ingestion write got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// Written now.
    Created,
    /// The same event was written before: nothing changed.
    Duplicate,
    /// The event id holds other usage: nothing changed.
    Conflict,
    /// The stack takes no raw usage (direct-submit): nothing written.
    Refused,
    /// Every attempt failed (the table's errors, lost answers): written or not, the
    /// client cannot tell.
    Unanswered,
}
