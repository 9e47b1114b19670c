//! The evaluator against IAM's documented logic, and the stacks' policies read from
//! the templates.

use super::*;

fn policy(yaml: &str) -> Policy {
    Policy::from_document(&serde_norway::from_str(yaml).unwrap()).unwrap()
}

fn policy_of_resource(yaml: &str) -> Policy {
    Policy::from_resource_document(&serde_norway::from_str(yaml).unwrap()).unwrap()
}

#[test]
fn wildcards_match_like_iam() {
    assert!(wildcard_match("dynamodb:*", "dynamodb:Query", true));
    assert!(wildcard_match("DynamoDB:query", "dynamodb:Query", true));
    assert!(!wildcard_match("arn:aws:s3:::B", "arn:aws:s3:::b", false));
    assert!(wildcard_match(
        "arn:*:table/t",
        "arn:aws:dynamodb:r:1:table/t",
        false
    ));
    assert!(!wildcard_match(
        "arn:*:table/t",
        "arn:aws:dynamodb:r:1:table/t/index/i",
        false
    ));
    assert!(wildcard_match(
        "arn:*:table/t*",
        "arn:aws:dynamodb:r:1:table/t/index/i",
        false
    ));
    assert!(wildcard_match("a?c", "abc", false));
    assert!(!wildcard_match("a?c", "ac", false));
    assert!(wildcard_match("*", "", false));
    assert!(wildcard_match("*a*b", "xxaxxb", false));
    assert!(!wildcard_match("*a*b", "xxaxxbc", false));
}

#[test]
fn deny_wins_and_nothing_allowed_is_denied() {
    let p = policy(
        r#"
Statement:
  - Sid: All
    Effect: Allow
    Action: "dynamodb:*"
    Resource: "arn:aws:dynamodb:*:1:table/t*"
  - Sid: NoDelete
    Effect: Deny
    Action: dynamodb:DeleteItem
    Resource: "*"
"#,
    );
    assert_eq!(
        p.evaluate("dynamodb:Query", "arn:aws:dynamodb:r:1:table/t/index/i"),
        Decision::Allowed {
            by: vec!["All".into()]
        }
    );
    assert_eq!(
        p.evaluate("dynamodb:DeleteItem", "arn:aws:dynamodb:r:1:table/t"),
        Decision::ExplicitDeny {
            by: "NoDelete".into()
        }
    );
    assert!(matches!(
        p.evaluate("sqs:SendMessage", "arn:aws:sqs:r:1:q"),
        Decision::ImplicitDeny { .. }
    ));
}

#[test]
fn not_action_not_resource_and_conditions() {
    let p = policy(
        r#"
Statement:
  - Effect: Allow
    NotAction: ["iam:*"]
    NotResource: "arn:aws:s3:::secret"
  - Sid: OnlyTagged
    Effect: Allow
    Action: sqs:SendMessage
    Resource: "*"
    Condition: { StringEquals: { "aws:ResourceTag/x": "y" } }
"#,
    );
    assert!(matches!(
        p.evaluate("s3:GetObject", "arn:aws:s3:::open"),
        Decision::Allowed { .. }
    ));
    assert!(matches!(
        p.evaluate("s3:GetObject", "arn:aws:s3:::secret"),
        Decision::ImplicitDeny { .. }
    ));
    assert!(matches!(
        p.evaluate("iam:PassRole", "arn:aws:iam::1:role/r"),
        Decision::ImplicitDeny { .. }
    ));
    // sqs:SendMessage matches the NotAction statement, not the conditional one, on
    // this resource; on the secret it is only conditionally allowed: denied.
    assert_eq!(
        p.evaluate("sqs:SendMessage", "arn:aws:s3:::secret"),
        Decision::ImplicitDeny {
            conditional: vec!["OnlyTagged".into()]
        }
    );
    assert_eq!(p.grants().len(), 2);
}

#[test]
fn an_attributes_condition_allows_only_the_attributes_it_lists() {
    let p = policy(
        r#"
Statement:
  - Sid: FewAttributes
    Effect: Allow
    Action: dynamodb:UpdateItem
    Resource: t
    Condition:
      ForAllValues:StringEquals:
        dynamodb:Attributes: [pk, sk, a]
      StringEqualsIfExists:
        dynamodb:ReturnValues: NONE
"#,
    );
    let attributes =
        |list: &[&str]| Context::new().with("dynamodb:Attributes", list.iter().copied());
    assert!(
        p.evaluate_in("dynamodb:UpdateItem", "t", &attributes(&["pk", "sk", "a"]))
            .is_allowed()
    );
    // One attribute more: not allowed.
    assert_eq!(
        p.evaluate_in(
            "dynamodb:UpdateItem",
            "t",
            &attributes(&["pk", "sk", "a", "b"])
        ),
        Decision::ImplicitDeny {
            conditional: vec!["FewAttributes".into()]
        }
    );
    // Asking for the row back: not allowed; saying NONE is.
    let returning = |what: &str| attributes(&["pk"]).with("dynamodb:ReturnValues", [what]);
    assert!(
        !p.evaluate_in("dynamodb:UpdateItem", "t", &returning("ALL_OLD"))
            .is_allowed()
    );
    assert!(
        p.evaluate_in("dynamodb:UpdateItem", "t", &returning("NONE"))
            .is_allowed()
    );
    // IAM's documented edge: ForAllValues over a key the request lacks holds.
    assert!(p.evaluate("dynamodb:UpdateItem", "t").is_allowed());
}

#[test]
fn conditions_follow_iams_rules_for_missing_keys_and_negation() {
    let holds = |operator: &str, values: &[&str], context: &Context| {
        Condition {
            operator: operator.to_string(),
            key: "k".to_string(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
        .holds(context)
    };
    let empty = Context::new();
    let one = Context::new().with("K", ["a"]);
    assert_eq!(holds("StringEquals", &["a"], &one), Some(true));
    assert_eq!(holds("StringEquals", &["a"], &empty), Some(false));
    assert_eq!(holds("StringNotEquals", &["a"], &empty), Some(true));
    assert_eq!(holds("StringNotEquals", &["a"], &one), Some(false));
    assert_eq!(holds("StringNotEquals", &["b"], &one), Some(true));
    assert_eq!(holds("StringEqualsIfExists", &["b"], &empty), Some(true));
    assert_eq!(holds("StringEqualsIfExists", &["b"], &one), Some(false));
    assert_eq!(
        holds(
            "ArnLike",
            &["arn:*:x"],
            &Context::new().with("k", ["arn:aws:x"])
        ),
        Some(true)
    );
    assert_eq!(
        holds("Bool", &["false"], &Context::new().with("k", ["false"])),
        Some(true)
    );
    assert_eq!(
        holds("Bool", &["false"], &Context::new().with("k", ["true"])),
        Some(false)
    );
    assert_eq!(holds("Null", &["true"], &empty), Some(true));
    assert_eq!(holds("Null", &["true"], &one), Some(false));
    assert_eq!(
        holds("ForAnyValue:StringEquals", &["a"], &empty),
        Some(false)
    );
    assert_eq!(
        holds("ForAllValues:StringEquals", &["a"], &empty),
        Some(true)
    );
    assert_eq!(holds("NumericLessThan", &["1"], &one), None);
}

#[test]
fn a_resource_policy_names_its_principals_and_its_deny_wins() {
    let table = policy_of_resource(
        r#"
Statement:
  - Sid: DenyNonTls
    Effect: Deny
    Principal: "*"
    Action: "dynamodb:*"
    Resource: t
    Condition: { Bool: { "aws:SecureTransport": "false" } }
  - Sid: OnlyTheseRoles
    Effect: Deny
    Principal: { AWS: "*" }
    Action: dynamodb:GetItem
    Resource: t
    Condition:
      ArnNotEquals: { "aws:PrincipalArn": ["arn:aws:iam::1:role/reader"] }
  - Sid: Account
    Effect: Allow
    Principal: { AWS: "arn:aws:iam::1:root" }
    Action: dynamodb:DescribeTable
    Resource: t
"#,
    );
    let tls = |principal: &str| {
        Context::new()
            .with("aws:SecureTransport", ["true"])
            .with("aws:PrincipalArn", [principal])
    };
    let reader = "arn:aws:iam::1:role/reader";
    let developer = "arn:aws:iam::1:role/developer";
    let decide =
        |who: &str, action: &str, context: &Context| table.evaluate_for(who, action, "t", context);
    assert!(matches!(
        decide(reader, "dynamodb:GetItem", &tls(reader)),
        Decision::ImplicitDeny { .. }
    ));
    assert_eq!(
        decide(developer, "dynamodb:GetItem", &tls(developer)),
        Decision::ExplicitDeny {
            by: "OnlyTheseRoles".into()
        }
    );
    let plain = Context::new()
        .with("aws:SecureTransport", ["false"])
        .with("aws:PrincipalArn", [reader]);
    assert_eq!(
        decide(reader, "dynamodb:GetItem", &plain),
        Decision::ExplicitDeny {
            by: "DenyNonTls".into()
        }
    );
    // The account names every principal in it, and no one outside it.
    assert!(decide(developer, "dynamodb:DescribeTable", &tls(developer)).is_allowed());
    assert!(
        !decide(
            "arn:aws:iam::2:role/x",
            "dynamodb:DescribeTable",
            &tls("arn:aws:iam::2:role/x")
        )
        .is_allowed()
    );
    // Combined with an identity policy that allows everything, the deny still wins.
    let admin = policy("Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]");
    let combined = admin
        .evaluate_in("dynamodb:GetItem", "t", &tls(developer))
        .with_resource_policy(decide(developer, "dynamodb:GetItem", &tls(developer)));
    assert!(matches!(combined, Decision::ExplicitDeny { .. }));
    // An identity policy may not name a principal, a resource policy must.
    assert!(
        Policy::from_document(
            &serde_norway::from_str(
                "Statement: [{Effect: Allow, Principal: \"*\", Action: a, Resource: r}]"
            )
            .unwrap()
        )
        .is_err()
    );
    assert!(
        Policy::from_resource_document(
            &serde_norway::from_str("Statement: [{Effect: Allow, Action: a, Resource: r}]")
                .unwrap()
        )
        .is_err()
    );
}

#[test]
fn grants_are_action_resource_pairs() {
    let p = policy(
        r#"
Statement:
  - Sid: S
    Effect: Allow
    Action: [dynamodb:GetItem, dynamodb:Query]
    Resource: [t, t/index/i]
"#,
    );
    let grants = p.grants();
    assert_eq!(grants.len(), 4);
    let get_on_index = grants
        .iter()
        .find(|g| g.action == "dynamodb:GetItem" && g.resource == "t/index/i")
        .unwrap();
    assert!(!p.grant_covers(get_on_index, "dynamodb:GetItem", "t"));
    assert!(p.grant_covers(get_on_index, "dynamodb:GetItem", "t/index/i"));
}
