//! The read operations on agreements: `DescribeAgreement`, `GetAgreementTerms`,
//! `SearchAgreements` (filters, sort, pagination) and `GetAgreementEntitlements`.

use chrono::{DateTime, Utc};

use super::AgreementBook;
use super::doc::{Input, Obj, Value, money, page, short_hash, text, time};
use super::error::AgreementError;
use super::model::{Agreement, AgreementStatus, GrantSeed};

/// The only catalog.
pub const CATALOG: &str = "AWSMarketplace";
/// The only agreement type the simulator holds.
pub const AGREEMENT_TYPE: &str = "PurchaseAgreement";
/// The resource type of every product the simulator holds.
pub const RESOURCE_TYPE: &str = "SaaSProduct";

fn party(account: &str) -> Value {
    Obj::new().s("accountId", account).done()
}

fn proposal_summary(a: &Agreement) -> Value {
    Obj::new()
        .s("offerId", &a.seed.offer_id)
        .opt("offerSetId", a.seed.offer_set_id.as_deref().map(text))
        .v(
            "resources",
            Value::Array(vec![
                Obj::new()
                    .s("id", a.product_id())
                    .s("type", RESOURCE_TYPE)
                    .done(),
            ]),
        )
        .done()
}

/// The agreement `agreementId` names, or ResourceNotFoundException.
pub fn find<'a>(book: &'a AgreementBook, id: &str) -> Result<&'a Agreement, AgreementError> {
    book.agreements
        .get(id)
        .ok_or_else(|| AgreementError::not_found("Agreement", id))
}

/// `DescribeAgreement`.
pub fn describe(book: &AgreementBook, request: &Value) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let a = find(book, &input.agreement_id()?)?;
    let agreement_value = a
        .seed
        .fixed_upfront
        .as_ref()
        .map_or_else(rust_decimal::Decimal::default, |f| f.price);
    Ok(Obj::new()
        .s("agreementId", &a.seed.agreement_id)
        .v("acceptor", party(&a.seed.customer_aws_account_id))
        .v("proposer", party(&a.seed.proposer_account_id))
        .v("startTime", time(a.start_time()))
        .opt("endTime", a.seed.end_time.map(time))
        .v("acceptanceTime", time(a.acceptance_time()))
        .s("agreementType", AGREEMENT_TYPE)
        .v(
            "estimatedCharges",
            Obj::new()
                .s("currencyCode", &a.seed.currency_code)
                .v("agreementValue", money(agreement_value))
                .done(),
        )
        .v("proposalSummary", proposal_summary(a))
        .s("status", a.seed.status.as_str())
        .s("initialAgreementId", a.initial_agreement_id())
        .opt(
            "endTimeBehavior",
            a.end_time_behavior()
                .map(|(kind, reason)| Obj::new().s("type", kind).s("reasonCode", reason).done()),
        )
        .done())
}

fn term_id(a: &Agreement, kind: &str) -> String {
    format!(
        "term-{:016x}",
        short_hash(&[&a.seed.offer_id, &a.seed.agreement_id, kind])
    )
}

fn grants(grants: &[GrantSeed]) -> Value {
    Value::Array(
        grants
            .iter()
            .map(|g| {
                Obj::new()
                    .s("dimensionKey", &g.dimension_key)
                    .opt(
                        "maxQuantity",
                        g.max_quantity.map(|q| Value::Integer(q.into())),
                    )
                    .done()
            })
            .collect(),
    )
}

/// The accepted terms of `a`, each a one-member union structure.
pub fn accepted_terms(a: &Agreement) -> Vec<Value> {
    let mut terms = Vec::new();
    let union = |key: &str, term: Value| Obj::new().v(key, term).done();
    terms.push(union(
        "legalTerm",
        Obj::new()
            .s("type", "LegalTerm")
            .s("id", term_id(a, "legal"))
            .v(
                "documents",
                Value::Array(vec![
                    Obj::new()
                        .s("type", "StandardEula")
                        .s("url", "https://aws.amazon.com/marketplace/eula")
                        .s("version", "2026-01-01")
                        .done(),
                ]),
            )
            .done(),
    ));
    if !a.seed.rate_card.is_empty() {
        let card = a
            .seed
            .rate_card
            .iter()
            .map(|r| {
                Obj::new()
                    .s("dimensionKey", &r.dimension_key)
                    .v("price", money(r.price))
                    .done()
            })
            .collect();
        terms.push(union(
            "usageBasedPricingTerm",
            Obj::new()
                .s("type", "UsageBasedPricingTerm")
                .s("id", term_id(a, "usage"))
                .s("currencyCode", &a.seed.currency_code)
                .v(
                    "rateCards",
                    Value::Array(vec![Obj::new().v("rateCard", Value::Array(card)).done()]),
                )
                .done(),
        ));
    }
    if let Some(trial) = &a.seed.free_trial {
        terms.push(union(
            "freeTrialPricingTerm",
            Obj::new()
                .s("type", "FreeTrialPricingTerm")
                .s("id", term_id(a, "trial"))
                .s("duration", format!("P{}D", trial.duration_days))
                .v("grants", grants(&trial.grants))
                .done(),
        ));
    }
    if let Some(upfront) = &a.seed.fixed_upfront {
        terms.push(union(
            "fixedUpfrontPricingTerm",
            Obj::new()
                .s("type", "FixedUpfrontPricingTerm")
                .s("id", term_id(a, "upfront"))
                .s("currencyCode", &a.seed.currency_code)
                .s("duration", &upfront.duration)
                .v("price", money(upfront.price))
                .v("grants", grants(&upfront.grants))
                .done(),
        ));
    }
    terms
}

/// `GetAgreementTerms`.
pub fn terms(book: &AgreementBook, request: &Value) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let a = find(book, &input.agreement_id()?)?;
    let page = page(&input, request)?;
    let (terms, next) = page.cut(accepted_terms(a));
    Ok(Obj::new()
        .v("acceptedTerms", Value::Array(terms))
        .opt("nextToken", next.map(text))
        .done())
}

/// One `filters[]` item, read.
#[derive(Debug)]
enum Filter {
    Text(&'static str, Vec<String>),
    Before(&'static str, DateTime<Utc>),
    After(&'static str, DateTime<Utc>),
}

const TEXT_FILTERS: [&str; 12] = [
    "ResourceIdentifier",
    "ResourceType",
    "PartyType",
    "AcceptorAccountId",
    "OfferId",
    "OfferSetId",
    "Status",
    "AgreementType",
    "EndTimeBehaviorType",
    "EndTimeBehaviorReasonCode",
    "InitialAgreementId",
    "LicenseArn",
];
const TIME_FILTERS: [&str; 3] = ["EndTime", "StartTime", "LastUpdateTime"];

fn read_filters(input: &Input<'_>) -> Result<Vec<Filter>, AgreementError> {
    let items = input.list("filters")?.unwrap_or_default();
    if items.is_empty() || items.len() > 10 {
        return Err(AgreementError::validation(
            "INVALID_FILTERS",
            "filters",
            format!(
                "filters must hold 1 to 10 items (got {}); AgreementType is required",
                items.len()
            ),
        ));
    }
    let mut filters = Vec::new();
    for item in items {
        let item = Input::item(item, "filters[]")?;
        let name = item.string("name")?.ok_or_else(|| {
            AgreementError::validation(
                "MISSING_FILTER_NAME",
                "filters.name",
                "a filter has no name",
            )
        })?;
        let mut values = Vec::new();
        for v in item.list("values")?.unwrap_or_default() {
            match v {
                Value::Text(s) => values.push(s.clone()),
                _ => {
                    return Err(AgreementError::serialization(
                        "filters[].values must be strings",
                    ));
                }
            }
        }
        if values.is_empty() {
            return Err(AgreementError::validation(
                "MISSING_FILTER_VALUES",
                "filters.values",
                format!("filter {name} has no values"),
            ));
        }
        if let Some(known) = TEXT_FILTERS.iter().find(|f| **f == name) {
            filters.push(Filter::Text(known, values));
            continue;
        }
        let (before, field) = match (name.strip_prefix("Before"), name.strip_prefix("After")) {
            (Some(f), _) => (true, f),
            (_, Some(f)) => (false, f),
            _ => (false, ""),
        };
        let Some(field) = TIME_FILTERS.iter().find(|f| **f == field) else {
            return Err(AgreementError::validation(
                "INVALID_FILTER_NAME",
                "filters.name",
                format!("unknown filter name {name:?}"),
            ));
        };
        let [value] = values.as_slice() else {
            return Err(AgreementError::validation(
                "INVALID_FILTER_VALUES",
                "filters.values",
                format!("filter {name} takes exactly one ISO 8601 time"),
            ));
        };
        let at: DateTime<Utc> = value.parse().map_err(|_| {
            AgreementError::validation(
                "INVALID_FILTER_VALUES",
                "filters.values",
                format!("filter {name}: {value:?} is not an ISO 8601 time"),
            )
        })?;
        filters.push(if before {
            Filter::Before(field, at)
        } else {
            Filter::After(field, at)
        });
    }
    let agreement_type = filters
        .iter()
        .find_map(|f| match f {
            Filter::Text("AgreementType", values) => Some(values),
            _ => None,
        })
        .ok_or_else(|| {
            AgreementError::validation(
                "INVALID_FILTERS",
                "filters",
                "the AgreementType filter is required",
            )
        })?;
    if agreement_type.iter().any(|t| t != AGREEMENT_TYPE) {
        return Err(AgreementError::validation(
            "INVALID_AGREEMENT_TYPE",
            "filters.values",
            format!("AgreementType must be {AGREEMENT_TYPE}"),
        ));
    }
    for filter in &filters {
        if let Filter::Text("Status", values) = filter
            && let Some(bad) = values
                .iter()
                .find(|v| !AgreementStatus::ALL.iter().any(|s| s.as_str() == *v))
        {
            return Err(AgreementError::validation(
                "INVALID_STATUS",
                "filters.values",
                format!("{bad:?} is not an agreement status"),
            ));
        }
        if let Filter::Text("PartyType", values) = filter
            && values.iter().any(|v| v != "Proposer" && v != "Acceptor")
        {
            return Err(AgreementError::validation(
                "INVALID_PARTY_TYPE",
                "filters.values",
                "PartyType is Proposer or Acceptor",
            ));
        }
    }
    Ok(filters)
}

fn time_of(a: &Agreement, field: &str) -> Option<DateTime<Utc>> {
    match field {
        "EndTime" => a.seed.end_time,
        "StartTime" => Some(a.start_time()),
        _ => Some(a.last_update_time),
    }
}

fn matches(a: &Agreement, filter: &Filter) -> bool {
    match filter {
        Filter::Text(name, values) => {
            let actual: Option<&str> = match *name {
                "ResourceIdentifier" => Some(a.product_id()),
                "ResourceType" => Some(RESOURCE_TYPE),
                // The caller is taken for either party of every agreement.
                "PartyType" => return true,
                "AcceptorAccountId" => Some(&a.seed.customer_aws_account_id),
                "OfferId" => Some(&a.seed.offer_id),
                "OfferSetId" => a.seed.offer_set_id.as_deref(),
                "Status" => Some(a.seed.status.as_str()),
                "AgreementType" => Some(AGREEMENT_TYPE),
                "EndTimeBehaviorType" => a.end_time_behavior().map(|b| b.0),
                "EndTimeBehaviorReasonCode" => a.end_time_behavior().map(|b| b.1),
                "InitialAgreementId" => Some(a.initial_agreement_id()),
                _ => Some(&a.seed.license_arn),
            };
            actual.is_some_and(|actual| values.iter().any(|v| v == actual))
        }
        // No end time: never before, always after.
        Filter::Before(field, at) => time_of(a, field).is_some_and(|t| t <= *at),
        Filter::After(field, at) => time_of(a, field).is_none_or(|t| t >= *at),
    }
}

fn summary(a: &Agreement) -> Value {
    let behavior = a.end_time_behavior();
    Obj::new()
        .s("agreementId", &a.seed.agreement_id)
        .v("acceptanceTime", time(a.acceptance_time()))
        .v("startTime", time(a.start_time()))
        .opt("endTime", a.seed.end_time.map(time))
        .v("lastUpdateTime", time(a.last_update_time))
        .s("agreementType", AGREEMENT_TYPE)
        .v("acceptor", party(&a.seed.customer_aws_account_id))
        .v("proposer", party(&a.seed.proposer_account_id))
        .v("proposalSummary", proposal_summary(a))
        .s("status", a.seed.status.as_str())
        .v(
            "entitlements",
            Value::Array(vec![Obj::new().s("licenseArn", &a.seed.license_arn).done()]),
        )
        .s("initialAgreementId", a.initial_agreement_id())
        .opt("endTimeBehaviorType", behavior.map(|b| text(b.0)))
        .opt("endTimeBehaviorReasonCode", behavior.map(|b| text(b.1)))
        .done()
}

/// `SearchAgreements`.
pub fn search(book: &AgreementBook, request: &Value) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    if let Some(catalog) = input.string("catalog")?
        && catalog != CATALOG
    {
        return Err(AgreementError::validation(
            "INVALID_CATALOG",
            "catalog",
            format!("catalog must be {CATALOG}"),
        ));
    }
    let filters = read_filters(&input)?;
    let (sort_by, descending) = match input.object("sort")? {
        None => ("EndTime", false),
        Some(sort) => {
            let by = match sort.string("sortBy")?.as_deref() {
                None | Some("EndTime") => "EndTime",
                Some("StartTime") => "StartTime",
                Some("LastUpdateTime") => "LastUpdateTime",
                Some(other) => {
                    return Err(AgreementError::validation(
                        "INVALID_SORT_BY",
                        "sort.sortBy",
                        format!("cannot sort by {other:?}"),
                    ));
                }
            };
            let descending = match sort.string("sortOrder")?.as_deref() {
                None | Some("ASCENDING") => false,
                Some("DESCENDING") => true,
                Some(other) => {
                    return Err(AgreementError::validation(
                        "INVALID_SORT_ORDER",
                        "sort.sortOrder",
                        format!("{other:?} is not ASCENDING or DESCENDING"),
                    ));
                }
            };
            (by, descending)
        }
    };
    let page = page(&input, request)?;
    let mut found: Vec<&Agreement> = book
        .agreements
        .values()
        .filter(|a| filters.iter().all(|f| matches(a, f)))
        .collect();
    // No end time sorts after every end time; ties by agreement id.
    found.sort_by(|x, y| {
        let key = |a: &Agreement| (time_of(a, sort_by).is_none(), time_of(a, sort_by));
        let order = key(x).cmp(&key(y));
        let order = if descending { order.reverse() } else { order };
        order.then_with(|| x.seed.agreement_id.cmp(&y.seed.agreement_id))
    });
    let (found, next) = page.cut(found);
    Ok(Obj::new()
        .v(
            "agreementViewSummaries",
            Value::Array(found.into_iter().map(summary).collect()),
        )
        .opt("nextToken", next.map(text))
        .done())
}

/// `GetAgreementEntitlements`; `issue_token` hands out a registration token that
/// ResolveCustomer will resolve to the agreement's license and account.
pub fn entitlements(
    book: &AgreementBook,
    request: &Value,
    now: DateTime<Utc>,
    issue_token: &mut dyn FnMut(&Agreement) -> String,
) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let a = find(book, &input.agreement_id()?)?;
    let page = page(&input, request)?;
    let (status, reason) = if a.seed.status != AgreementStatus::Active {
        ("DEPROVISIONED", "AGREEMENT_INACTIVE")
    } else if a.start_time() > now {
        ("SCHEDULED", "FUTURE_START_DATE")
    } else {
        ("PROVISIONED", "AGREEMENT_ACTIVE")
    };
    let mut items = vec![(a, status, reason)];
    let (items, next) = page.cut(std::mem::take(&mut items));
    let items = items
        .into_iter()
        .map(|(a, status, reason)| {
            let token = (status == "PROVISIONED").then(|| issue_token(a));
            Obj::new()
                .v(
                    "resource",
                    Obj::new()
                        .s("id", a.product_id())
                        .s("type", RESOURCE_TYPE)
                        .done(),
                )
                .s("type", "AWS::Marketplace::Usage")
                .s("status", status)
                .s("statusReasonCode", reason)
                .s("licenseArn", &a.seed.license_arn)
                .opt("registrationToken", token.map(text))
                .done()
        })
        .collect();
    Ok(Obj::new()
        .v("agreementEntitlements", Value::Array(items))
        .opt("nextToken", next.map(text))
        .done())
}
