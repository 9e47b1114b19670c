//! The operator: `awsmp usage import` of two usage files while the pipeline runs, and
//! later, after reading `awsmp failures`, `awsmp dlq redrive` on the dead-letter alarm,
//! maybe defining the refused dimension in the catalog, and `awsmp replay` of the Error
//! records while the pipeline runs.

use std::sync::Mutex;

use awsmp_core::guardrails::GuardrailContext;
use awsmp_core::guardrails::write::{accepts_raw_usage, check_row};
use awsmp_core::memory::MemoryOperatorStore;
use awsmp_core::model::GroupKey;
use awsmp_core::ports::Clock;
use awsmp_core::ports::{MeteringRecord, NewUsageRow};
use awsmp_core::time::{HourBucket, format_instant};
use awsmp_operate::import::{ImportTarget, Progress, ProgressKeeper, one_deployment, write_lines};
use awsmp_operate::replay;

use crate::executor::Task;
use crate::options::Operator;
use crate::scenario::{ACCOUNT, IMPORTED, POISON, PRODUCT, license};
use crate::sim::yield_now;
use crate::stack::{Stack, lock};
use crate::world::Import;

/// Progress of an import kept beside its file (one path: both files are exported to it
/// in turn).
struct BesideTheFile<'a>(&'a mut Progress);

impl ProgressKeeper for BesideTheFile<'_> {
    fn keep(&mut self, progress: &Progress) -> Result<(), String> {
        *self.0 = progress.clone();
        Ok(())
    }
}

/// The operator importing into `stacks` (this product's deployments: one or two
/// Regions) while the pipeline runs; what it imported lands in `imports`.
pub fn importer<'a>(
    stacks: Vec<&'a Stack>,
    options: &'a Operator,
    hour: HourBucket,
    imports: &'a Mutex<Vec<Import>>,
) -> Task<'a> {
    Task::new("importer", async move {
        let done = imports_of(&stacks, options, hour).await;
        lock(imports).extend(done);
    })
}

/// The operator's `awsmp usage import`, as the command runs it: two usage files exported
/// to the same path in turn (the second with the same number of lines and the same
/// length, other events), each imported into one deployment. Now and then the operator
/// names both Regions and is refused (a write goes into one deployment); an import
/// whose table answers fail is rerun, resuming from the progress kept beside the file.
async fn imports_of(stacks: &[&Stack], options: &Operator, hour: HourBucket) -> Vec<Import> {
    let Some(first) = stacks.first() else {
        return Vec::new();
    };
    let sim = &first.sim;
    let mut beside = Progress::default();
    let mut imports = Vec::new();
    for (file, plan) in (1..=2).zip(options.imports) {
        for _ in 0..sim.below(30) {
            yield_now().await;
        }
        let rows: Vec<(usize, NewUsageRow)> = (0..options.import_lines)
            .map(|n| {
                let quantity = 1 + i64::try_from(sim.below(9)).unwrap_or(0);
                let at = hour.start() + chrono::Duration::seconds(1200 + n as i64);
                let id = format!("imp{file}-{n}");
                let row = awsmp_core::memory::fixtures::usage_row(
                    &license(1),
                    ACCOUNT,
                    IMPORTED,
                    at,
                    quantity,
                    &id,
                );
                (n + 1, row)
            })
            .collect();
        let content: String = rows
            .iter()
            .map(|(_, r)| {
                format!(
                    "{},{},{},{},{},{}\n",
                    r.license_arn,
                    r.customer_aws_account_id,
                    r.dimension,
                    format_instant(r.timestamp),
                    r.quantity,
                    r.event_id
                )
            })
            .collect();
        let Some(target) = stacks.get(plan.target) else {
            continue;
        };
        let named: Vec<&str> = if plan.names_both {
            stacks.iter().map(|s| s.region).collect()
        } else {
            vec![target.region]
        };
        // Refused: the operator reads the message and names the one Region.
        let region = one_deployment("usage import", named)
            .ok()
            .flatten()
            .unwrap_or(target.region);
        let Some(stack) = stacks.iter().find(|s| s.region == region) else {
            continue;
        };
        let mut import = Import {
            region,
            product: stack.product,
            lines: rows
                .iter()
                .map(|(_, r)| (r.license_arn.clone(), r.event_id.clone(), r.quantity))
                .collect(),
            done: false,
            refused: accepts_raw_usage(stack.mode()).is_err(),
        };
        if !import.refused {
            let target = ImportTarget::new(region, "usage", content.as_bytes());
            for _ in 0..4 {
                let now = stack.clock.now();
                let ctx = GuardrailContext::new(now, stack.product.to_string());
                if rows.iter().any(|(_, r)| check_row(r, &ctx, now).is_err()) {
                    break;
                }
                let mut progress = beside.clone();
                let written = write_lines(
                    stack.usage.as_ref(),
                    &rows,
                    &target,
                    false,
                    &mut progress,
                    &mut BesideTheFile(&mut beside),
                    now,
                )
                .await;
                if written.is_ok_and(|w| w.conflicts.is_empty()) {
                    import.done = true;
                    break;
                }
                yield_now().await;
            }
        }
        imports.push(import);
    }
    imports
}

/// The seller reads `awsmp failures`, maybe defines the refused dimension in the
/// catalog, and replays the Error records (since `oldest`) while the pipeline runs.
pub fn replayer<'a>(
    stack: &'a Stack,
    operator: &'a MemoryOperatorStore,
    options: &'a Operator,
    (oldest, refused): (HourBucket, HourBucket),
) -> Task<'a> {
    Task::new("operator", async move {
        for _ in 0..stack.sim.below(60) {
            yield_now().await;
        }
        // The dead-letter alarm: `awsmp dlq redrive` moves the messages back.
        if options.redrive {
            for queue in stack.queues() {
                queue.redrive();
            }
        }
        if options.defines_poison {
            stack
                .metering
                .inner
                .accept_dimension(POISON)
                .unwrap_or_else(|e| panic!("define {POISON}: {e}"));
            // Now and then something else (a second stack, a script) bills the
            // refused hour first, before the replay re-sends it.
            if options.rival_bills {
                stack
                    .metering
                    .bill_as_rival(MeteringRecord {
                        key: GroupKey {
                            license_arn: license(2),
                            customer_aws_account_id: ACCOUNT.to_string(),
                            dimension: POISON.to_string(),
                            hour: refused,
                        },
                        product_code: PRODUCT.to_string(),
                        quantity: 999,
                        allocations: None,
                    })
                    .await;
            }
        }
        let selection = replay::Selection::FailedSince(oldest);
        let now = stack.clock.now();
        // Its answer may be lost; the operator then runs it again.
        for _ in 0..options.replays {
            let _ =
                replay::replay(stack.aggregated.as_ref(), operator, &selection, now, false).await;
        }
    })
}
