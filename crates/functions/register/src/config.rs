//! The register function's configuration: read once at init from the variables its
//! template sets, every problem reported at once. `CUSTOMER_PROFILE_TABLE` is the one
//! exception to failing init: the spec wants an unset or empty value answered per
//! request with HTTP 500 "Registration store not configured", so it stays optional here.

use awsmp_lambda::{ConfigError, EnvReader};
use url::Url;

use crate::form::{MAX_ALLOWED_FIELDS, MAX_FIELD_NAME_CHARS, TOKEN_FIELD};

/// Every variable the template sets for this function (compared with the template).
pub const ENV_VARS: &[&str] = &[
    "PRODUCT_CODE",
    "SUBSCRIBERS_TABLE",
    "SUBSCRIBERS_TABLE_REGION",
    "CUSTOMER_PROFILE_TABLE",
    "ALLOWED_REGISTRATION_FIELDS",
    "RESOLVE_CUSTOMER_REGION",
    "REGISTRATION_PAGE_URL",
    "ALLOWED_ORIGIN",
    "STAGE",
];

/// Variables the Lambda runtime itself sets (not the template) that this function reads.
pub const RUNTIME_ENV_VARS: &[&str] = &["AWS_REGION"];

/// Attribute names a registration field may never take: they are the customer-profile
/// table's keys and bookkeeping, which a form field must not overwrite.
pub const RESERVED_FIELD_NAMES: &[&str] = &[
    "licenseArn",
    "customerAWSAccountId",
    "productCode",
    "createdAt",
    "updatedAt",
];

/// The register function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PRODUCT_CODE`: the stack's product; a token resolving to another product is refused.
    pub product_code: String,
    /// `SUBSCRIBERS_TABLE`: the PII-free subscribers table (us-east-1).
    pub subscribers_table: String,
    /// `SUBSCRIBERS_TABLE_REGION`: where the subscribers table lives.
    pub subscribers_table_region: String,
    /// `CUSTOMER_PROFILE_TABLE`: the in-Region profile table; `None` when unset or empty,
    /// which every registration answers with HTTP 500 (see the module docs).
    pub customer_profile_table: Option<String>,
    /// `ALLOWED_REGISTRATION_FIELDS`: the form fields kept (others are dropped).
    pub allowed_fields: Vec<String>,
    /// `RESOLVE_CUSTOMER_REGION`: Region of the `ResolveCustomer` client.
    pub resolve_customer_region: String,
    /// `REGISTRATION_PAGE_URL`: the branded page the fulfillment endpoint redirects to.
    pub registration_page_url: Url,
    /// `ALLOWED_ORIGIN`: the page's origin (`scheme://host[:port]`), the only `Origin` a
    /// browser may post from.
    pub allowed_origin: String,
    /// `AWS_REGION`: the Region this function runs in, recorded in `registeredRegions`.
    pub region: String,
    /// `STAGE`: the stack's stage, a dimension of every metric beside the product.
    pub stage: String,
}

impl Config {
    /// Reads through `lookup` (the process environment in Lambda; tests pass a map);
    /// every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let product_code = env.product_code();
        let subscribers_table = env.subscribers_table();
        let subscribers_table_region = env.subscribers_table_region();
        let customer_profile_table = env.optional("CUSTOMER_PROFILE_TABLE");
        let allowed_fields = env.list("ALLOWED_REGISTRATION_FIELDS");
        let resolve_customer_region = env.required("RESOLVE_CUSTOMER_REGION");
        let page = env.required("REGISTRATION_PAGE_URL");
        let origin = env.required("ALLOWED_ORIGIN");
        let region = env.required("AWS_REGION");
        let stage = env.stage();

        for problem in allowed_field_problems(&allowed_fields) {
            env.problem(problem);
        }
        let registration_page_url = if page.is_empty() {
            None
        } else {
            match page_url(&page) {
                Ok(url) => Some(url),
                Err(problem) => {
                    env.problem(format!("REGISTRATION_PAGE_URL={page:?}: {problem}"));
                    None
                }
            }
        };
        let allowed_origin = if origin.is_empty() {
            String::new()
        } else {
            match origin_of(&origin) {
                Ok(origin) => origin,
                Err(problem) => {
                    env.problem(format!("ALLOWED_ORIGIN={origin:?}: {problem}"));
                    String::new()
                }
            }
        };

        let Some(registration_page_url) = registration_page_url else {
            // A problem is already recorded for it; finish reports them all.
            return Err(env.finish(()).err().unwrap_or_else(|| ConfigError {
                problems: vec!["REGISTRATION_PAGE_URL is not set".to_string()],
            }));
        };
        env.finish(Config {
            product_code,
            subscribers_table,
            subscribers_table_region,
            customer_profile_table,
            allowed_fields,
            resolve_customer_region,
            registration_page_url,
            allowed_origin,
            region,
            stage,
        })
    }
}

/// Why an allowlist entry cannot be used, one line each.
fn allowed_field_problems(fields: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    if fields.len() > MAX_ALLOWED_FIELDS {
        problems.push(format!(
            "ALLOWED_REGISTRATION_FIELDS lists {} fields; at most {MAX_ALLOWED_FIELDS} are allowed",
            fields.len()
        ));
    }
    for (i, name) in fields.iter().enumerate() {
        let shape_ok = name.chars().count() <= MAX_FIELD_NAME_CHARS
            && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !shape_ok {
            problems.push(format!(
                "ALLOWED_REGISTRATION_FIELDS: {name:?} is not a field name (a letter, then up to {} letters, digits, '_', '-' or '.')",
                MAX_FIELD_NAME_CHARS - 1
            ));
        }
        if name == TOKEN_FIELD {
            problems.push(format!(
                "ALLOWED_REGISTRATION_FIELDS: {TOKEN_FIELD} is the registration token and is never stored"
            ));
        }
        if RESERVED_FIELD_NAMES.contains(&name.as_str()) {
            problems.push(format!(
                "ALLOWED_REGISTRATION_FIELDS: {name:?} is a key or bookkeeping attribute of the customer-profile table"
            ));
        }
        if fields[..i].contains(name) {
            problems.push(format!(
                "ALLOWED_REGISTRATION_FIELDS: {name:?} is listed twice"
            ));
        }
    }
    problems
}

fn is_loopback_host(url: &Url) -> bool {
    matches!(
        url.host_str(),
        Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
    )
}

/// An absolute `https` URL (or `http` on a loopback host, for the local stack) with no
/// fragment: the fulfillment endpoint puts the token in the fragment.
fn page_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("not an absolute URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback_host(&url) => {}
        other => {
            return Err(format!(
                "scheme {other:?}: the page must be served over https (http only on localhost)"
            ));
        }
    }
    if url.fragment().is_some() {
        return Err("must not have a #fragment: the token is passed in it".to_string());
    }
    Ok(url)
}

/// The ASCII origin `scheme://host[:port]`; paths, queries and fragments are refused so a
/// typo does not silently turn into a different origin.
fn origin_of(text: &str) -> Result<String, String> {
    let url =
        Url::parse(text).map_err(|e| format!("not an origin like https://example.com ({e})"))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(format!("scheme {:?} is not http or https", url.scheme()));
    }
    if url.scheme() == "http" && !is_loopback_host(&url) {
        return Err("must be https (http only on localhost)".to_string());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("an origin has no path, query or fragment".to_string());
    }
    Ok(url.origin().ascii_serialization())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    fn valid() -> HashMap<&'static str, String> {
        HashMap::from([
            ("PRODUCT_CODE", "prod-abc".to_string()),
            ("SUBSCRIBERS_TABLE", "awsmp-subscribers-test".to_string()),
            ("SUBSCRIBERS_TABLE_REGION", "us-east-1".to_string()),
            (
                "CUSTOMER_PROFILE_TABLE",
                "awsmp-prod-abc-customer-profile".to_string(),
            ),
            (
                "ALLOWED_REGISTRATION_FIELDS",
                "companyName, contactEmail".to_string(),
            ),
            ("RESOLVE_CUSTOMER_REGION", "us-east-1".to_string()),
            (
                "REGISTRATION_PAGE_URL",
                "https://register.example.com/index.html".to_string(),
            ),
            ("ALLOWED_ORIGIN", "https://register.example.com".to_string()),
            ("AWS_REGION", "us-west-2".to_string()),
            ("STAGE", "test".to_string()),
        ])
    }

    fn read(vars: &HashMap<&'static str, String>) -> Result<Config, ConfigError> {
        Config::from_lookup(&|k| vars.get(k).cloned())
    }

    #[test]
    fn reads_a_valid_environment() {
        let config = read(&valid()).unwrap();
        assert_eq!(config.allowed_fields, ["companyName", "contactEmail"]);
        assert_eq!(config.allowed_origin, "https://register.example.com");
        assert_eq!(config.region, "us-west-2");
        assert_eq!(
            config.customer_profile_table.as_deref(),
            Some("awsmp-prod-abc-customer-profile")
        );
    }

    #[test]
    fn env_vars_lists_exactly_what_is_read() {
        let vars = valid();
        let asked = RefCell::new(Vec::new());
        let lookup = |k: &str| {
            asked.borrow_mut().push(k.to_string());
            vars.get(k).cloned()
        };
        Config::from_lookup(&lookup).unwrap();
        let mut expected: Vec<&str> = ENV_VARS.iter().chain(RUNTIME_ENV_VARS).copied().collect();
        expected.sort_unstable();
        let mut asked = asked.into_inner();
        asked.sort_unstable();
        assert_eq!(asked, expected);
    }

    #[test]
    fn customer_profile_table_unset_or_empty_does_not_fail_init() {
        let mut vars = valid();
        vars.insert("CUSTOMER_PROFILE_TABLE", "  ".to_string());
        assert_eq!(read(&vars).unwrap().customer_profile_table, None);
        vars.remove("CUSTOMER_PROFILE_TABLE");
        assert_eq!(read(&vars).unwrap().customer_profile_table, None);
    }

    #[test]
    fn zero_allowed_fields_is_valid() {
        let mut vars = valid();
        vars.remove("ALLOWED_REGISTRATION_FIELDS");
        assert!(read(&vars).unwrap().allowed_fields.is_empty());
    }

    #[test]
    fn reports_every_problem_at_once() {
        let vars = HashMap::from([
            (
                "ALLOWED_REGISTRATION_FIELDS",
                "ok,1bad,x-amzn-marketplace-token,licenseArn,ok".to_string(),
            ),
            (
                "REGISTRATION_PAGE_URL",
                "http://register.example.com/#x".to_string(),
            ),
            (
                "ALLOWED_ORIGIN",
                "https://register.example.com/path".to_string(),
            ),
        ]);
        let err = read(&vars).unwrap_err();
        let text = err.to_string();
        for needle in [
            "PRODUCT_CODE is not set",
            "SUBSCRIBERS_TABLE is not set",
            "SUBSCRIBERS_TABLE_REGION is not set",
            "RESOLVE_CUSTOMER_REGION is not set",
            "AWS_REGION is not set",
            "STAGE is not set",
            "\"1bad\" is not a field name",
            "x-amzn-marketplace-token is the registration token",
            "\"licenseArn\" is a key or bookkeeping attribute",
            "\"ok\" is listed twice",
            "REGISTRATION_PAGE_URL=\"http://register.example.com/#x\": scheme \"http\"",
            "ALLOWED_ORIGIN=\"https://register.example.com/path\": an origin has no path",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        assert!(!text.contains("CUSTOMER_PROFILE_TABLE"), "{text}");
    }

    #[test]
    fn page_url_and_origin_rules() {
        assert!(page_url("https://example.com/register").is_ok());
        assert!(page_url("http://127.0.0.1:8080/index.html").is_ok());
        assert!(page_url("http://example.com/").is_err());
        assert!(page_url("https://example.com/#token=").is_err());
        assert!(page_url("/relative").is_err());
        assert_eq!(
            origin_of("https://Example.com").unwrap(),
            "https://example.com"
        );
        assert_eq!(
            origin_of("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(
            origin_of("https://example.com:443").unwrap(),
            "https://example.com"
        );
        assert!(origin_of("https://example.com?x=1").is_err());
        assert!(origin_of("ftp://example.com").is_err());
    }

    #[test]
    fn too_many_allowed_fields() {
        let mut vars = valid();
        let names: Vec<String> = (0..=MAX_ALLOWED_FIELDS).map(|i| format!("f{i}")).collect();
        vars.insert("ALLOWED_REGISTRATION_FIELDS", names.join(","));
        assert!(read(&vars).unwrap_err().to_string().contains("at most"));
    }
}
