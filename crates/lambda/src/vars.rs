//! The variables several functions read, each read in one place, with its name, its
//! default and its checks, as methods of [`EnvReader`]; and the contract between the
//! templates and the handlers: every variable a handler reads, set by its template and
//! nothing else (`tests/deploy/check_templates.py` holds the templates to the table below).
//!
//! ## Environment variables
//! Read once at init, by `awsmp_lambda::init` through each function crate's
//! `Config::from_lookup` (an [`EnvReader`]; a variable several functions read has one
//! reader here), which reports every problem at once.
//!
//! | variable | read by | meaning |
//! |---|---|---|
//! | `PRODUCT_CODE` | register, usage-api, discoverer, aggregator, cleanup, submitter | the stack's product code (and the `ProductCode` dimension of every metric) |
//! | `STAGE` | register, discoverer, cleanup, submitter | the stack's `StageName`, the `Stage` dimension of every metric |
//! | `SUBSCRIBERS_TABLE` | subscription, deprovision-cleanup, agreement-reconcile, register, discoverer, submitter, usage-api, buyer-events | subscribers table name (buyer-events: the table whose stream it reads) |
//! | `SUBSCRIBERS_TABLE_REGION` | register, discoverer, submitter, usage-api | Region of the subscribers table (us-east-1) |
//! | `USAGE_TABLE` | usage-api, discoverer, aggregator, cleanup, outcome-events | raw usage table |
//! | `AGGREGATED_TABLE` | usage-api, aggregator, submitter, outcome-events | aggregated-usage table |
//! | `CUSTOMER_PROFILE_TABLE` | register, discoverer | `awsmp-<productCode>-customer-profile` (register: unset/empty gives HTTP 500 "Registration store not configured"; discoverer: where a deprovisioned buyer's profile expiry goes) |
//! | `PROFILE_RETENTION_DAYS` | discoverer | days a buyer's profile is kept once the license's deprovisioning window ends (0..=3653, default 0 = until erased); the discoverer writes the profile's `expiresAt` |
//! | `WORK_QUEUE_URL` | discoverer | normal aggregation work |
//! | `DEPROVISION_WORK_QUEUE_URL` | discoverer | deprovisioning-flush work (consumed first) |
//! | `CLEANUP_QUEUE_URL` | aggregator | cleanup work |
//! | `METERING_LOCK_HOURS` | discoverer, aggregator | 1..20, default 1 |
//! | `FLUSH_MARGIN_MINUTES` | discoverer | the open hour is flushed by the last discoverer run at least this long before `deprovisioningExpiry` (default 6: the submitter's period, now one minute, plus the send, with the room the old 5-minute period needed; usage up to 6–21 min before the expiry is billed, later rows become `HourAlreadySubmitted`) |
//! | `ZERO_QUANTITY_POLICY` | aggregator, submitter | `defer` (default: submit a zero hour only at the window's oldest edge), `submit`, `skip` |
//! | `METERING_MODE` | submitter | `live` or `dry-run` |
//! | `TEST_ACCOUNT_ALLOWLIST` | submitter | comma-separated 12-digit accounts; required in dry-run, refused in live |
//! | `USAGE_API_READ_SCOPE` | usage-api | with `UsageApiAuthorization` jwt the read scope of `UsageApiJwtScopes` (a POST answers what a reused id recorded only to a token with it); empty with iam |
//! | `DEPLOYMENT_MODE` | usage-api, submitter | `full` or `direct-submit` (the usage API refuses raw usage in a direct-submit stack) |
//! | `METERING_REQUESTS_PER_SECOND` | submitter | this stack's share (1..10, default 10) of the account's 10 `BatchMeterUsage` requests/s in the Region; parameter `MeteringRequestsPerSecond` |
//! | `DATA_RETENTION_DAYS` | discoverer, aggregator, cleanup, submitter | parameter `DataRetentionDays`: 0 (default) keeps every item; otherwise at least 3 (`retention::MIN_RETENTION_DAYS`): the write that makes a raw row or a record final sets `expiresAt` that many days later (see "Retention") |
//! | `RATE_CARDS` | subscription | `enabled` (the events stack runs the agreement reconciliation) or `disabled`: after License Updated or Purchase Agreement Amended, read the agreement's terms and keep them on the row as its rate card |
//! | `RECONCILE_PRODUCTS` | agreement-reconcile | parameter `ReconcileProducts`: `prod-id=productCode` pairs, comma-separated: the products whose agreements it reconciles |
//! | `ALLOWED_REGISTRATION_FIELDS` | register | comma-separated allowlist of form fields |
//! | `RESOLVE_CUSTOMER_REGION` | register | Region for `ResolveCustomer` |
//! | `REGISTRATION_PAGE_URL` | register | the branded page; the fulfillment endpoint 303s there with the token in the fragment |
//! | `ALLOWED_ORIGIN` | register | the page's origin: the only `Origin` a browser may post from (the page's distribution serves `/register` on it) |
//!
//! SDK endpoints come from the SDK's own variables (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
//! `AWS_ENDPOINT_URL_MARKETPLACE_METERING`, `AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT`);
//! handlers never read them.

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::retention::Retention;
use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::MeteringLockHours;

use super::EnvReader;

impl EnvReader<'_> {
    /// `PRODUCT_CODE` (required): the stack's product, a dimension of every metric.
    pub fn product_code(&mut self) -> String {
        self.required("PRODUCT_CODE")
    }

    /// `STAGE` (required, a stage name): the stack's stage, a dimension of every metric.
    pub fn stage(&mut self) -> String {
        let stage = self.required("STAGE");
        if !stage.is_empty()
            && let Some(problem) = awsmp_aws::metrics::stage_problem(&stage)
        {
            self.problem(problem);
        }
        stage
    }

    /// `SUBSCRIBERS_TABLE` (required).
    pub fn subscribers_table(&mut self) -> String {
        self.required("SUBSCRIBERS_TABLE")
    }

    /// `SUBSCRIBERS_TABLE_REGION` (required): the subscribers table lives in us-east-1.
    pub fn subscribers_table_region(&mut self) -> String {
        self.required("SUBSCRIBERS_TABLE_REGION")
    }

    /// `USAGE_TABLE` (required): the raw usage table.
    pub fn usage_table(&mut self) -> String {
        self.required("USAGE_TABLE")
    }

    /// `AGGREGATED_TABLE` (required): the aggregated-usage table.
    pub fn aggregated_table(&mut self) -> String {
        self.required("AGGREGATED_TABLE")
    }

    /// `METERING_LOCK_HOURS` (1..=20, default 1).
    pub fn metering_lock(&mut self) -> MeteringLockHours {
        self.parsed_or("METERING_LOCK_HOURS", MeteringLockHours::DEFAULT)
    }

    /// `ZERO_QUANTITY_POLICY` (default `defer`).
    pub fn zero_quantity_policy(&mut self) -> ZeroQuantityPolicy {
        self.parsed_or("ZERO_QUANTITY_POLICY", ZeroQuantityPolicy::default())
    }

    /// `DATA_RETENTION_DAYS` (0 = keep everything, the default; else at least
    /// `MIN_RETENTION_DAYS`): the `expiresAt` of every item the function makes final.
    pub fn retention(&mut self) -> Retention {
        self.parsed_or("DATA_RETENTION_DAYS", Retention::FOREVER)
    }

    /// `DEPLOYMENT_MODE` (required): `full` or `direct-submit`.
    pub fn deployment_mode(&mut self) -> DeploymentMode {
        let text = self.required("DEPLOYMENT_MODE");
        match text.parse() {
            Ok(mode) => mode,
            Err(e) => {
                if !text.is_empty() {
                    self.problem(e.to_string());
                }
                DeploymentMode::Full
            }
        }
    }
}
