use super::*;
use awsmp_operate::memory::MemoryProfiles;

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const ACCOUNT: &str = "111122223333";
const TABLE: &str = "awsmp-p-customer-profile";

fn key() -> ProfileKey {
    ProfileKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
    }
}

fn at(text: &str) -> awsmp_core::time::Instant {
    text.parse().unwrap()
}

/// A table in `region` with the buyer's row when `registered`.
fn region(name: &str, registered: bool) -> (ProfilePlace, MemoryProfiles) {
    let table = MemoryProfiles::new();
    if registered {
        table.insert(
            &key(),
            &[
                ("productCode", "p"),
                ("createdAt", "2026-03-01T10:00:00Z"),
                ("updatedAt", "2026-03-01T10:00:00Z"),
                ("companyName", "Example\u{1b}[2J Corp\r\n| forged | row |"),
                ("contactEmail", "ops@example.com"),
            ],
        );
    }
    (
        ProfilePlace {
            region: name.into(),
            table: TABLE.into(),
        },
        table,
    )
}

fn placed(regions: &[&(ProfilePlace, MemoryProfiles)]) -> Vec<PlacedTable> {
    regions
        .iter()
        .map(|(place, table)| {
            let table: Box<dyn PiiTable> = Box::new(table.clone());
            (place.clone(), table)
        })
        .collect()
}

fn denied() -> ProfileError {
    ProfileError::Denied {
        operation: "DeleteItem".into(),
        table: TABLE.into(),
        message: "AccessDeniedException: User: arn:aws:iam::123456789012:role/ops is not authorized to perform: dynamodb:DeleteItem with an explicit deny in a resource-based policy".into(),
    }
}

#[test]
fn only_y_or_yes_confirms() {
    for (answer, confirmed) in [
        ("y\n", true),
        ("YES\n", true),
        (" yes \n", true),
        ("n\n", false),
        ("\n", false),
        ("", false),
        ("erase\n", false),
    ] {
        let mut prompt = Vec::new();
        let got = confirm("Erase?", &mut answer.as_bytes(), &mut prompt).unwrap();
        assert_eq!(got, confirmed, "{answer:?}");
        assert_eq!(String::from_utf8(prompt).unwrap(), "Erase? [y/N] ");
    }
}

#[test]
fn the_buyer_is_named_by_license_arn_and_12_digit_account() {
    let buyer = |license: &str, account: &str| Buyer {
        license: license.into(),
        account: account.into(),
    };
    assert_eq!(buyer(LICENSE, ACCOUNT).key().unwrap(), key());
    for account in ["11112222333", "1111222233334", "11112222333a", ""] {
        let error = buyer(LICENSE, account).key().unwrap_err();
        assert!(matches!(error, CommandError::Usage(_)), "{account}");
        assert!(error.to_string().contains("12 digits"), "{error}");
    }
    let error = buyer("l-0123456789abcdef0", ACCOUNT).key().unwrap_err();
    assert!(error.to_string().contains("license id"), "{error}");
}

/// GIVEN the buyer registered in one Region of two, WHEN shown, THEN the row of the
/// one, escaped, and "no profile" for the other; exit 0. Nowhere: exit 3.
#[tokio::test]
async fn show_prints_each_regions_row_escaped() {
    let east = region("us-east-1", true);
    let west = region("eu-west-1", false);
    let shown = show_all(&placed(&[&east, &west]), &key()).await.unwrap();
    let outcome = render_show(&shown, Format::Human);
    let text = &outcome.text;
    assert!(!outcome.attention && !outcome.failed, "{text}");
    assert!(
        text.contains(&format!(
            "us-east-1 ({TABLE}): the profile of {LICENSE} / {ACCOUNT}"
        )),
        "{text}"
    );
    assert!(text.contains("| contactEmail | ops@example.com "), "{text}");
    assert!(
        text.contains("Example\\u{1b}[2J Corp\\u{d}\\u{a}| forged | row |"),
        "{text}"
    );
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(
        text.contains(&format!(
            "eu-west-1 ({TABLE}): no profile for {LICENSE} / {ACCOUNT} in eu-west-1"
        )),
        "{text}"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&render_show(&shown, Format::Json).text).unwrap();
    assert_eq!(doc["regions"][0]["found"], true);
    assert_eq!(
        doc["regions"][0]["profile"]["fields"]["contactEmail"],
        "ops@example.com"
    );
    assert_eq!(doc["regions"][1]["found"], false);

    let nowhere = show_all(&placed(&[&west]), &key()).await.unwrap();
    assert!(render_show(&nowhere, Format::Human).attention);
}

/// GIVEN the buyer registered in one Region of two, WHEN erased, THEN the row is gone
/// there, the other says "nothing erased", one audit record names the buyer by keys
/// with none of the data; exit 0. Again: nothing anywhere, exit 3, no audit.
#[tokio::test]
async fn erase_deletes_in_each_region_and_audits_without_the_data() {
    let east = region("us-east-1", true);
    let west = region("eu-west-1", false);
    let tables = placed(&[&east, &west]);
    let mut audits = Vec::new();
    let now = at("2026-03-20T08:00:00Z");
    let erasure = erase_all(&tables, &key(), now, Some("pii"), false, &mut |a| {
        audits.push(a.line())
    })
    .await
    .unwrap();
    assert!(!east.1.contains(&key()));
    assert_eq!(audits.len(), 1);
    for data in ["Example", "ops@example.com", "contactEmail"] {
        assert!(!audits[0].contains(data), "{}", audits[0]);
    }
    let outcome = render_erase(&erasure, Format::Human);
    assert!(!outcome.attention && !outcome.failed, "{}", outcome.text);
    assert!(
        outcome.text.contains(&format!(
            "us-east-1 ({TABLE}): erased the profile of {LICENSE} / {ACCOUNT}; point-in-time recovery can restore it until 2026-04-24T08:00:00Z"
        )),
        "{}",
        outcome.text
    );
    assert!(
        outcome.text.contains(&format!(
            "eu-west-1 ({TABLE}): no profile for {LICENSE} / {ACCOUNT} in eu-west-1; nothing erased"
        )),
        "{}",
        outcome.text
    );
    assert!(outcome.text.contains("access logs"), "{}", outcome.text);

    let doc: serde_json::Value =
        serde_json::from_str(&render_erase(&erasure, Format::Json).text).unwrap();
    assert_eq!(doc["regions"][0]["result"], "erased");
    assert_eq!(doc["regions"][0]["audit"]["event"], "ProfileErased");
    assert_eq!(doc["regions"][0]["audit"]["aws_profile"], "pii");
    assert_eq!(doc["regions"][1]["result"], "absent");
    assert_eq!(doc["regions"][1]["audit"], serde_json::Value::Null);

    let mut again = Vec::new();
    let erasure = erase_all(&tables, &key(), now, None, false, &mut |a| {
        again.push(a.line())
    })
    .await
    .unwrap();
    assert!(again.is_empty());
    let outcome = render_erase(&erasure, Format::Human);
    assert!(outcome.attention, "nothing erased anywhere: exit 3");
    assert!(!outcome.text.contains("access logs"), "{}", outcome.text);
}

#[tokio::test]
async fn a_dry_run_erases_nothing() {
    let east = region("us-east-1", true);
    let erasure = erase_all(
        &placed(&[&east]),
        &key(),
        at("2026-03-20T08:00:00Z"),
        None,
        true,
        &mut |_| panic!("no audit for a dry run"),
    )
    .await
    .unwrap();
    assert!(east.1.contains(&key()));
    assert_eq!(east.1.calls(), ["get"]);
    let outcome = render_erase(&erasure, Format::Human);
    assert!(!outcome.attention);
    assert!(
        outcome
            .text
            .contains("would erase the profile of arn:aws:license-manager"),
        "{}",
        outcome.text
    );
}

/// AccessDenied says which role to use; in the only Region it is the command's error
/// (exit 1); after another Region was erased, that Region's result is still printed
/// and the exit code is 1.
#[tokio::test]
async fn access_denied_says_to_use_the_profile_role() {
    let east = region("us-east-1", true);
    let west = region("eu-west-1", true);
    west.1.refuse(Some(denied()));
    let now = at("2026-03-20T08:00:00Z");

    let error = erase_all(&placed(&[&west]), &key(), now, None, false, &mut |_| ())
        .await
        .unwrap_err();
    assert!(matches!(error, CommandError::Aws(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.starts_with("eu-west-1: DeleteItem on awsmp-p-customer-profile was refused"),
        "{text}"
    );
    assert!(
        text.contains("lets only the register function's role and the PII role named by the stack parameter ProfileAccessRoleArn read or delete its items: run `awsmp profile` with that role's credentials"),
        "{text}"
    );

    let mut audits = 0;
    let erasure = erase_all(
        &placed(&[&east, &west]),
        &key(),
        now,
        None,
        false,
        &mut |_| audits += 1,
    )
    .await
    .unwrap();
    assert_eq!(audits, 1);
    let outcome = render_erase(&erasure, Format::Human);
    assert!(outcome.failed, "{}", outcome.text);
    assert!(
        outcome
            .text
            .contains("us-east-1 (awsmp-p-customer-profile): erased"),
        "{}",
        outcome.text
    );
    assert!(
        outcome
            .text
            .contains("eu-west-1 (awsmp-p-customer-profile): failed: DeleteItem"),
        "{}",
        outcome.text
    );
    let doc: serde_json::Value =
        serde_json::from_str(&render_erase(&erasure, Format::Json).text).unwrap();
    assert_eq!(doc["failed"][0]["region"], "eu-west-1");

    let missing = region("ap-south-1", true);
    missing.1.refuse(Some(ProfileError::NoTable {
        table: TABLE.into(),
        message: "ResourceNotFoundException: Requested resource not found".into(),
    }));
    let error = show_all(&placed(&[&missing]), &key()).await.unwrap_err();
    assert!(matches!(error, CommandError::NotFound(_)), "{error:?}");
}
