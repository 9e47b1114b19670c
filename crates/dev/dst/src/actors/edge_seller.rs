//! The usage API across the edges of time: the seller's service posts batches to the
//! usage API's handler (native JSON, and CloudEvents from two producers whose ids
//! overlap), stamped at an hour's last seconds, at the 24-hour edge (inside 24 hours
//! of the usage's own instant, outside 24 hours of its hour's start) and on a month's
//! last second, with now and then an event id longer than DynamoDB's keys take; it
//! retries whole batches as the clock moves on through settling: across hours' ends,
//! the metering lock, the 24-hour edge and 06:00 on the 1st. Its table refuses keys as
//! DynamoDB does (the in-memory usage store does). What it was answered ([`EdgeLog`])
//! is held to [`crate::check::api_edges`].

use std::sync::{Arc, Mutex};

use awsmp_core::memory::ManualClock;
use awsmp_core::ports::{AggregatedStore, Clock, SubscriberStore, UsageStore};
use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::{HourBucket, Instant, MeteringLockHours, format_instant};
use chrono::{Datelike, Duration, TimeZone, Timelike, Utc};
use serde_json::{Value, json};

use crate::executor::{self, Task};
use crate::sim::Sim;
use crate::stack::lock;

/// The dimension the edge seller meters (apart from the other tasks' usage).
pub const DIMENSION: &str = "edges";
/// The two CloudEvents producers; they number their events alike.
pub const SOURCES: [&str; 2] = ["/svc/orders", "/svc/search"];
/// Ids every producer uses.
const IDS: [&str; 3] = ["1", "2", "3"];
/// Settling steps at which new batches are posted (later steps only retry: a batch
/// posted then is sent by the runs that follow while its hour is in the window).
const POSTING_STEPS: usize = 3;
/// Polls of one step's task (a guard).
const MAX_STEPS: u64 = 50_000;

/// Who posted an event: the native format's caller, or a CloudEvents producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Producer {
    /// `application/json`: keyed by `id`.
    Native,
    /// `application/cloudevents-batch+json` from `SOURCES[n]`: keyed by source and id.
    Cloud(usize),
}

/// One event of a batch, the same on every retry.
#[derive(Debug, Clone)]
pub struct Posted {
    /// Its producer.
    pub producer: Producer,
    /// Its id.
    pub id: String,
    /// Its quantity (fixed per producer and id: a retry carries the same usage).
    pub quantity: i64,
    /// Its timestamp; `None`: "when received".
    pub stamped: Option<Instant>,
}

impl Posted {
    /// The key its row and marker are stored under (core's one definition).
    pub fn key(&self) -> String {
        awsmp_core::usage_api::event_key(self.source(), &self.id)
    }

    fn source(&self) -> Option<&'static str> {
        match self.producer {
            Producer::Native => None,
            Producer::Cloud(n) => Some(SOURCES[n]),
        }
    }

    /// How a violation names it.
    pub fn label(&self) -> String {
        match self.source() {
            None => format!("event {:.40}", self.id),
            Some(source) => format!("CloudEvent {:.40} of {source}", self.id),
        }
    }

    fn json(&self, license: &str) -> Value {
        let usage = json!({
            "licenseArn": license,
            "customerAWSAccountId": crate::scenario::ACCOUNT,
            "dimension": DIMENSION,
            "quantity": self.quantity,
        });
        let stamped = self.stamped.map(format_instant);
        match self.source() {
            None => {
                let mut event = usage;
                event["id"] = json!(self.id);
                if let Some(at) = stamped {
                    event["timestamp"] = json!(at);
                }
                event
            }
            Some(source) => {
                let mut event = json!({"specversion": "1.0", "id": self.id, "source": source,
                    "type": "com.example.usage", "data": usage});
                if let Some(at) = stamped {
                    event["time"] = json!(at);
                }
                event
            }
        }
    }
}

/// One post of a batch and what it was answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// When it was posted.
    pub at: Instant,
    /// The batch's events.
    pub events: Vec<Posted>,
    /// The HTTP status.
    pub status: i64,
    /// Each event's verdict (`status`, `reason`), when the status is 200.
    pub verdicts: Vec<(String, Option<String>)>,
}

/// What the edge seller did, for [`crate::check::api_edges`].
#[derive(Debug, Clone, Default)]
pub struct EdgeLog {
    /// The license it posts for.
    pub license: String,
    /// The stack's metering lock.
    pub lock: Option<MeteringLockHours>,
    /// Every post, in order.
    pub answers: Vec<Answer>,
    /// Once settled, each accepted event read back (`GET /usage/events/{id}`): the
    /// event, the HTTP status and the answer.
    pub read_backs: Vec<(Posted, i64, Value)>,
}

/// The seller's service posting across the edges (one per schedule, full stacks only).
pub struct EdgeSeller {
    sim: Sim,
    clock: ManualClock,
    state: awsmp_usage_api::State,
    batches: Mutex<Vec<Vec<Posted>>>,
    steps: Mutex<usize>,
    log: Mutex<EdgeLog>,
}

impl EdgeSeller {
    /// A seller posting for `license` to the usage API of a stack with `product` and
    /// `lock`, over its tables.
    pub fn new(
        sim: &Sim,
        clock: &ManualClock,
        (usage, aggregated): (Arc<dyn UsageStore>, Arc<dyn AggregatedStore>),
        subscribers: Arc<dyn SubscriberStore>,
        (product, lock): (&str, MeteringLockHours),
        license: String,
    ) -> Self {
        let state = awsmp_usage_api::State {
            config: Arc::new(awsmp_usage_api::Config {
                usage_table: "usage".into(),
                aggregated_table: "aggregated".into(),
                product_code: product.into(),
                deployment_mode: DeploymentMode::Full,
                read_scope: None,
                subscribers_table: "subscribers".into(),
                subscribers_table_region: "us-east-1".into(),
            }),
            usage,
            aggregated,
            subscribers,
            clock: Arc::new(clock.clone()),
        };
        EdgeSeller {
            sim: sim.clone(),
            clock: clock.clone(),
            state,
            batches: Mutex::new(Vec::new()),
            steps: Mutex::new(0),
            log: Mutex::new(EdgeLog {
                license,
                lock: Some(lock),
                answers: Vec::new(),
                read_backs: Vec::new(),
            }),
        }
    }

    /// What it did.
    pub fn log(&self) -> EdgeLog {
        lock(&self.log).clone()
    }

    /// Once settled: reads back every event a post accepted, as the seller's service
    /// would to learn its fate (and what it is worth).
    pub fn read_back(&self) {
        let (license, accepted) = {
            let log = lock(&self.log);
            let mut accepted: Vec<Posted> = Vec::new();
            for answer in &log.answers {
                for (event, (status, _)) in answer.events.iter().zip(&answer.verdicts) {
                    if status == "accepted" && !accepted.iter().any(|a| a.key() == event.key()) {
                        accepted.push(event.clone());
                    }
                }
            }
            (log.license.clone(), accepted)
        };
        let tasks = vec![Task::new("seller-reads-back", async move {
            for event in accepted {
                let (status, answer) = crate::actors::usage_api::get_event(
                    &self.state,
                    &event.id,
                    &license,
                    event.source(),
                )
                .await;
                lock(&self.log).read_backs.push((event, status, answer));
            }
        })];
        executor::run(&self.sim, tasks, false, MAX_STEPS, &|_| {});
    }

    /// One settling step, before the pipeline runs: new batches in the first steps,
    /// and now and then a retry of each earlier batch, whole, at the clock's time now.
    pub fn step(&self) {
        let step = {
            let mut steps = lock(&self.steps);
            *steps += 1;
            *steps - 1
        };
        let now = self.clock.now();
        if step < POSTING_STEPS {
            for _ in 0..1 + self.sim.below(2) {
                let batch = self.batch(now);
                lock(&self.batches).push(batch);
            }
        }
        let batches = lock(&self.batches).clone();
        let chosen: Vec<Vec<Posted>> = batches
            .into_iter()
            .enumerate()
            .filter(|(n, _)| {
                // Posted this step (n among the last), or retried one time in four.
                self.sim.below(4) == 0
                    || step < POSTING_STEPS && *n + 2 >= lock(&self.batches).len()
            })
            .map(|(_, b)| b)
            .collect();
        if chosen.is_empty() {
            return;
        }
        let tasks = vec![Task::new("seller-edges", async move {
            for batch in chosen {
                self.post(batch).await;
            }
        })];
        executor::run(&self.sim, tasks, false, MAX_STEPS, &|_| {});
    }

    /// A batch of one producer (one media type): its events stamped at the edges.
    fn batch(&self, now: Instant) -> Vec<Posted> {
        let producer = match self.sim.below(3) {
            0 => Producer::Native,
            n => Producer::Cloud(n - 1),
        };
        let hour = HourBucket::containing(now).start();
        let day_ago = now - Duration::hours(24);
        let month_end = Utc
            .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
            .single()
            .map(|first| first - Duration::seconds(10));
        let mut batch: Vec<Posted> = Vec::new();
        for _ in 0..1 + self.sim.below(3) {
            let id_n = self.sim.below(IDS.len());
            let stamped = match self.sim.below(6) {
                0 => None,
                // The last seconds of the hour that just ended.
                1 => Some(hour - Duration::seconds(1 + self.sim.below(20) as i64)),
                // Inside 24 h of its own instant, in the hour that began before them.
                2 => {
                    let left = 3599 - i64::from(day_ago.minute() * 60 + day_ago.second());
                    let into = 1 + self.sim.below(usize::try_from(left.max(1)).unwrap_or(1));
                    Some(day_ago + Duration::seconds(into as i64))
                }
                // The first hour still inside the window.
                3 => Some(HourBucket::containing(day_ago).start() + Duration::minutes(61)),
                // The month's last seconds, while they are inside the window.
                4 => month_end.filter(|t| *t > day_ago).or(Some(now)),
                _ => Some(now - Duration::seconds(self.sim.below(600) as i64)),
            };
            // Now and then an id longer than DynamoDB's sort keys take (a CloudEvent is
            // keyed by a digest of it, so it stays storable).
            let id = if self.sim.below(8) == 0 {
                format!("{}-{}", IDS[id_n], "x".repeat(1100))
            } else {
                IDS[id_n].to_string()
            };
            let quantity = 10 * id_n as i64
                + match producer {
                    Producer::Native => 1,
                    Producer::Cloud(n) => 2 + n as i64,
                };
            // One producer's id is one event: the stamp it first got, in this batch or
            // an earlier one.
            let first = batch
                .iter()
                .chain(lock(&self.batches).iter().flatten())
                .find(|e| e.producer == producer && e.id == id)
                .map(|e| e.stamped);
            batch.push(Posted {
                producer,
                stamped: first.unwrap_or(stamped),
                id,
                quantity,
            });
        }
        batch
    }

    async fn post(&self, events: Vec<Posted>) {
        let license = lock(&self.log).license.clone();
        let cloud = events
            .first()
            .is_some_and(|e| e.producer != Producer::Native);
        let list: Vec<Value> = events.iter().map(|e| e.json(&license)).collect();
        let (content_type, body) = if cloud {
            ("application/cloudevents-batch+json", json!(list))
        } else {
            ("application/json", json!({ "events": list }))
        };
        let at = self.clock.now();
        let (status, answer) =
            crate::actors::usage_api::post_events(&self.state, content_type, body.to_string())
                .await;
        let verdicts = answer["results"]
            .as_array()
            .map(|results| {
                results
                    .iter()
                    .map(|r| {
                        (
                            r["status"].as_str().unwrap_or("").to_string(),
                            r["reason"].as_str().map(str::to_string),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        lock(&self.log).answers.push(Answer {
            at,
            events,
            status,
            verdicts,
        });
    }
}
