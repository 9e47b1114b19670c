//! The seller: the usage its own writer puts in the usage table before and while the
//! pipeline runs (a group of more than 99 rows, small groups, a poison dimension, the
//! open hour of a license about to be deprovisioned, late rows), or in direct-submit
//! mode the hourly totals it writes into the aggregated table and updates in place;
//! and its service recording usage events through `awsmp_usage::Meter` or, half the
//! time, the usage API ([`crate::actors::usage_api`]).

use std::sync::Arc;
use std::time::Duration;

use awsmp_core::memory::{MemoryTables, reference_row};
use awsmp_core::model::GroupKey;
use awsmp_core::ports::Clock;
use awsmp_core::ports::UsageStore;
use awsmp_core::time::{HourBucket, Instant, format_instant};
use awsmp_usage::{Meter, Recorded, Usage, UsageError};

use crate::executor::Task;
use crate::options::{LateGroup, OddItems, Seller};
use crate::scenario::{ACCOUNT, Hours, POISON, PRODUCT};
use crate::sim::{Sim, yield_now};
use crate::stack::{Stack, lock};
use crate::world::{Event, Ingested};

/// The `team` tags the seller's service allocates usage to.
const TEAMS: [&str; 2] = ["search", "ads"];

/// A usage row the seller writes.
pub struct Row {
    license: String,
    dimension: &'static str,
    timestamp: Instant,
    quantity: i64,
}

/// Row `n` of `license`'s `dimension` in `hour`, its quantity drawn (zero now and
/// then: a group may total zero, and each zero policy handles it).
pub fn row_at(
    sim: &Sim,
    license: &str,
    dimension: &'static str,
    hour: HourBucket,
    n: usize,
) -> Row {
    // Distinct seconds within the hour's first 20 minutes (every schedule starts 20 or
    // more minutes into its hour, so no row of the open hour is in the future) keep
    // reference-shaped sort keys unique.
    let second = i64::try_from(n).unwrap_or(0) % 1200;
    Row {
        license: license.to_string(),
        dimension,
        timestamp: hour.start() + chrono::Duration::seconds(second),
        quantity: i64::try_from(sim.below(6)).unwrap_or(0),
    }
}

/// Writes the seller's usage: a raw row; or, in direct-submit mode, the hour's total in
/// the aggregated table, created or updated in place (quantity only, while pending) as
/// a seller's `PutItem` / `UpdateItem` would.
pub fn write(tables: &MemoryTables, product: &str, row: &Row, direct: bool) {
    if !direct {
        tables.insert_raw_row(reference_row(
            &row.license,
            ACCOUNT,
            row.dimension,
            &format_instant(row.timestamp),
            row.quantity,
        ));
        return;
    }
    let key = GroupKey {
        license_arn: row.license.clone(),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: row.dimension.to_string(),
        hour: HourBucket::containing(row.timestamp),
    };
    match tables
        .aggregated_records()
        .into_iter()
        .find(|r| r.key == key)
    {
        Some(stored) => {
            tables.update_aggregated_quantity(&key, stored.quantity + row.quantity);
        }
        None => tables.insert_aggregated(
            awsmp_core::memory::fixtures::pending_record(key, product, row.quantity, 0),
            row.timestamp,
        ),
    }
}

/// The licenses of the schedule's three buyers of [`PRODUCT`].
pub type Buyers<'a> = [&'a String; 3];

/// The usage written before the run: a group of more than 99 rows, small groups, a
/// poison dimension, the deprovisioned license's last two hours, and the oldest hour
/// still in the window (it closes while the pipeline runs, so a run, a stale or a slow
/// one, may cross its edge with its records pending). A direct-submit seller's odd
/// items too.
pub fn usage_before(
    sim: &Sim,
    tables: &MemoryTables,
    options: &Seller,
    [l1, l2, l3]: Buyers<'_>,
    hours: &Hours,
    direct: bool,
) {
    let mut rows = Vec::new();
    for n in 0..options.big_group {
        rows.push(row_at(sim, l1, "storage", hours.oldest, n));
    }
    for n in 0..options.small_group {
        rows.push(row_at(sim, l1, "requests", hours.newest, n));
    }
    for n in 0..options.poison_rows {
        rows.push(row_at(sim, l2, "requests", hours.newest, n));
        rows.push(row_at(sim, l2, POISON, hours.newest, n));
    }
    for n in 0..options.final_hours_rows {
        rows.push(row_at(sim, l3, "requests", hours.previous, n));
        rows.push(row_at(sim, l3, "requests", hours.current, n));
    }
    for n in 0..options.closing_hour_rows {
        rows.push(row_at(sim, l1, "events", hours.current.plus_hours(-23), n));
    }
    for row in &rows {
        write(tables, PRODUCT, row, direct);
    }
    if let Some(odd) = options.odd_items {
        odd_items(tables, odd, (l1, PRODUCT), hours.newest);
    }
}

/// Rows `first..` of `groups`, written later (their quantities drawn now).
pub fn late_rows(
    sim: &Sim,
    groups: &[LateGroup],
    [l1, l2, l3]: Buyers<'_>,
    hours: &Hours,
    first: usize,
) -> Vec<Row> {
    groups
        .iter()
        .enumerate()
        .map(|(n, group)| {
            let (license, dimension, hour) = match group {
                LateGroup::Big => (l1, "storage", hours.oldest),
                LateGroup::Small => (l1, "requests", hours.newest),
                LateGroup::Open => (l3, "requests", hours.current),
                LateGroup::Poisoned => (l2, "requests", hours.newest),
            };
            row_at(sim, license, dimension, hour, first + n)
        })
        .collect()
}

/// The seller's writer putting `rows` in while the pipeline runs, a scheduler step
/// apart, the clock moving on up to 89 seconds before each.
pub fn writer<'a>(stack: &'a Stack, tables: &'a MemoryTables, rows: &'a [Row]) -> Task<'a> {
    Task::new("writer", async move {
        for row in rows {
            yield_now().await;
            stack
                .clock
                .advance(Duration::from_secs(stack.sim.below(90) as u64));
            write(tables, PRODUCT, row, stack.direct);
        }
    })
}

/// The writer minutes later, putting `rows` in up to 19 scheduler steps apart.
pub fn later_writer<'a>(stack: &'a Stack, tables: &'a MemoryTables, rows: &'a [Row]) -> Task<'a> {
    Task::new("writer#2", async move {
        for row in rows {
            for _ in 0..stack.sim.below(20) {
                yield_now().await;
            }
            write(tables, PRODUCT, row, stack.direct);
        }
    })
}

/// A direct-submit seller's odd items: a row the submitter cannot read (it lacks its
/// hour; closed `Error` as malformed), and a record whose product code is huge (billed
/// all the same: the body never carries it; its outcome is larger than one `PutEvents`
/// entry may be). Each must still be told, and must not hold the others back.
fn odd_items(
    tables: &MemoryTables,
    odd: OddItems,
    (license_arn, product): (&str, &str),
    hour: HourBucket,
) {
    if odd.malformed {
        tables.insert_malformed_aggregated(
            license_arn,
            &format!("{ACCOUNT}#events"),
            &hour.to_string(),
            "no hourBucket (a seller's direct-submit row)",
        );
    }
    if let Some(quantity) = odd.huge {
        let key = GroupKey {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: ACCOUNT.to_string(),
            dimension: "events".to_string(),
            hour,
        };
        let huge = format!("{product}-{}", "x".repeat(300 * 1024));
        tables.insert_aggregated(
            awsmp_core::memory::fixtures::pending_record(key, &huge, quantity, 0),
            hour.start(),
        );
    }
}

/// The seller's service recording its events for `license_arn` while the pipeline
/// runs.
pub fn service<'a>(stack: &'a Stack, options: &'a Seller, license_arn: String) -> Task<'a> {
    Task::new("seller-api", async move {
        for _ in 0..stack.sim.below(40) {
            yield_now().await;
        }
        stack.record_events(options, &license_arn).await;
    })
}

impl Stack {
    /// The seller's service recording usage events through the ingestion port, as
    /// `awsmp usage put` and `awsmp_usage::Meter` do: each event stamped "now" by
    /// default, retried with the same id (and a later "now") when the answer is lost;
    /// now and then a buggy client reuses an id for other usage, which must be refused.
    /// A seller tags every event or none (a group mixing both is refused,
    /// `MixedAllocatedAndUnallocated`).
    async fn record_events(&self, options: &Seller, license_arn: &str) {
        for n in 0..options.events {
            let quantity = 1 + i64::try_from(self.sim.below(5)).unwrap_or(0);
            let team = options.tagged.then(|| TEAMS[self.sim.below(TEAMS.len())]);
            let event = Event {
                license: license_arn.to_string(),
                event_id: format!("evt-{n}"),
                quantity,
                team,
                answer: Ingested::Created,
            };
            self.ingest(event.clone()).await;
            if self.sim.below(3) == 0 {
                self.ingest(Event {
                    quantity: quantity + 1,
                    ..event
                })
                .await;
            }
            for _ in 0..self.sim.below(10) {
                yield_now().await;
            }
        }
    }

    /// One event through the seller's library ([`Meter`], told the stack's mode) or, half
    /// the time, posted to the usage API (its real handler on the same store), retried
    /// (up to three times) while the answer is an error.
    async fn ingest(&self, event: Event) {
        if self.sim.below(2) == 0 {
            self.ingest_through_api(event).await;
        } else {
            self.ingest_through_meter(event).await;
        }
    }

    /// Notes `copies` sends of `event` as [`Ingested::Unanswered`] before they are sent
    /// (a crash or a lost answer leaves them so); their slots, for [`Self::answered`].
    pub(crate) fn sending(&self, event: &Event, copies: usize) -> Vec<usize> {
        let mut ingested = lock(&self.ingested);
        (0..copies)
            .map(|_| {
                ingested.push(Event {
                    answer: Ingested::Unanswered,
                    ..event.clone()
                });
                ingested.len() - 1
            })
            .collect()
    }

    /// The answer the send in `slot` got.
    pub(crate) fn answered(&self, slot: usize, answer: Ingested) {
        if let Some(event) = lock(&self.ingested).get_mut(slot) {
            event.answer = answer;
        }
    }

    async fn ingest_through_meter(&self, event: Event) {
        let slot = self.sending(&event, 1)[0];
        let store: Arc<dyn UsageStore> = self.usage.clone();
        let meter = Meter::with_store(store, self.product).in_mode(self.mode());
        let mut usage = Usage::new(
            &event.license,
            ACCOUNT,
            "events",
            event.quantity,
            &event.event_id,
        );
        if let Some(team) = event.team {
            usage = usage.tag("team", team);
        }
        for _ in 0..3 {
            let answer = match meter.record_at(&usage, self.clock.now()).await {
                Ok(Recorded::Written) => Ingested::Created,
                Ok(Recorded::AlreadyWritten) => Ingested::Duplicate,
                Err(UsageError::Conflict(_)) => Ingested::Conflict,
                Err(UsageError::DirectSubmit(_)) => Ingested::Refused,
                Err(_) => continue,
            };
            self.answered(slot, answer);
            return;
        }
    }
}
