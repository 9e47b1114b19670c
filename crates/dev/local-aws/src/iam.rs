//! A small IAM policy evaluator over the roles of the stack templates, for the IAM
//! contract test: what a function's role allows, read from the template exactly as it
//! deploys ([`crate::cfn::StackTemplate`] resolves the intrinsics), and whether one
//! request (an action on a resource) is allowed.
//!
//! Evaluation follows IAM's identity-policy logic: an explicit `Deny` that applies
//! wins; otherwise an `Allow` that applies allows; otherwise the request is implicitly
//! denied. A statement applies when its `Action` matches (or `NotAction` does not) and
//! its `Resource` matches (or `NotResource` does not). Actions match case-insensitively,
//! resources case-sensitively, both with the `*` and `?` wildcards. A statement with a
//! `Condition` cannot be decided without the request context: an `Allow` with one
//! never allows here and a `Deny` with one always denies (the strict reading), so a
//! grant that depends on a condition is reported as missing rather than assumed. The
//! one condition decided is an `Allow`'s `ForAllValues:StringEquals` on
//! `dynamodb:Attributes` alone, against the attributes the request names
//! ([`Policy::evaluate_with`]): it allows when every one is listed.
//!
//! What the evaluator cannot read is an error, never an assumption: SAM policy
//! templates (`Policies` on a function), `ManagedPolicyArns`, a permissions boundary.

use serde_norway::Value;

use crate::cfn::StackTemplate;
use crate::error::LocalAwsError;

/// `Allow` or `Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Allows what it matches.
    Allow,
    /// Denies what it matches, whatever allows it.
    Deny,
}

/// One policy statement, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// `Sid`, or `#<index>` when it has none.
    pub sid: String,
    /// Its effect.
    pub effect: Effect,
    /// `Action` (or `NotAction`) patterns.
    pub actions: Vec<String>,
    /// Whether `actions` is a `NotAction`.
    pub not_action: bool,
    /// `Resource` (or `NotResource`) patterns.
    pub resources: Vec<String>,
    /// Whether `resources` is a `NotResource`.
    pub not_resource: bool,
    /// Whether it has a `Condition` this evaluator cannot decide.
    pub conditional: bool,
    /// The attributes of a `ForAllValues:StringEquals` `dynamodb:Attributes` condition,
    /// when that is the statement's only condition.
    pub allowed_attributes: Option<Vec<String>>,
}

/// Whether `text` matches the IAM `pattern` (`*` = any run, `?` = any one character).
pub fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if ignore_case {
            s.to_lowercase().chars().collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (fold(pattern), fold(text));
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

impl Statement {
    fn matches_action(&self, action: &str) -> bool {
        let any = self.actions.iter().any(|p| wildcard_match(p, action, true));
        any != self.not_action
    }

    fn matches_resource(&self, resource: &str) -> bool {
        let any = self
            .resources
            .iter()
            .any(|p| wildcard_match(p, resource, false));
        any != self.not_resource
    }

    /// Whether the statement covers the request (conditions aside).
    pub fn applies(&self, action: &str, resource: &str) -> bool {
        self.matches_action(action) && self.matches_resource(resource)
    }

    /// Reads a resolved statement.
    pub fn from_value(value: &Value, index: usize) -> Result<Statement, String> {
        let sid = value
            .get("Sid")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{index}"));
        let effect = match value.get("Effect").and_then(Value::as_str) {
            Some("Allow") => Effect::Allow,
            Some("Deny") => Effect::Deny,
            other => return Err(format!("statement {sid}: Effect {other:?}")),
        };
        let list = |key: &str| -> Result<Option<Vec<String>>, String> {
            match value.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
                Some(Value::Sequence(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| format!("statement {sid}: {key} item {v:?}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(other) => Err(format!("statement {sid}: {key} {other:?}")),
            }
        };
        let (actions, not_action) = match (list("Action")?, list("NotAction")?) {
            (Some(a), None) => (a, false),
            (None, Some(a)) => (a, true),
            _ => {
                return Err(format!(
                    "statement {sid}: needs exactly one of Action, NotAction"
                ));
            }
        };
        let (resources, not_resource) = match (list("Resource")?, list("NotResource")?) {
            (Some(r), None) => (r, false),
            (None, Some(r)) => (r, true),
            _ => {
                return Err(format!(
                    "statement {sid}: needs exactly one of Resource, NotResource"
                ));
            }
        };
        if value.get("Principal").is_some() || value.get("NotPrincipal").is_some() {
            return Err(format!(
                "statement {sid}: a Principal has no place in an identity policy"
            ));
        }
        let allowed_attributes = value
            .get("Condition")
            .and_then(Value::as_mapping)
            .filter(|c| c.len() == 1)
            .and_then(|c| c.get("ForAllValues:StringEquals"))
            .and_then(Value::as_mapping)
            .filter(|c| c.len() == 1)
            .and_then(|c| c.get("dynamodb:Attributes"))
            .and_then(Value::as_sequence)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|_| effect == Effect::Allow);
        Ok(Statement {
            sid,
            effect,
            actions,
            not_action,
            resources,
            not_resource,
            conditional: value.get("Condition").is_some() && allowed_attributes.is_none(),
            allowed_attributes,
        })
    }
}

/// What IAM decides for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, by these statements.
    Allowed {
        /// Sids of the allowing statements.
        by: Vec<String>,
    },
    /// No statement allows it.
    ImplicitDeny {
        /// Sids of `Allow` statements that would apply but carry a `Condition`.
        conditional: Vec<String>,
    },
    /// A `Deny` statement applies.
    ExplicitDeny {
        /// Its sid.
        by: String,
    },
}

/// One grant of an `Allow` statement: an action pattern on a resource pattern.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The statement's position in [`Policy::statements`].
    pub statement: usize,
    /// The statement's sid.
    pub sid: String,
    /// The action pattern (`NotAction [..]` for a `NotAction` statement).
    pub action: String,
    /// The resource pattern (`NotResource [..]` for a `NotResource` statement).
    pub resource: String,
}

/// The statements of every policy of one role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// In document order.
    pub statements: Vec<Statement>,
}

impl Policy {
    /// Reads a resolved policy document (`{Version, Statement}`).
    pub fn from_document(document: &Value) -> Result<Policy, String> {
        let statements = match document.get("Statement") {
            Some(Value::Sequence(items)) => items.iter().collect::<Vec<_>>(),
            Some(single @ Value::Mapping(_)) => vec![single],
            other => return Err(format!("policy document Statement {other:?}")),
        };
        Ok(Policy {
            statements: statements
                .into_iter()
                .enumerate()
                .map(|(i, s)| Statement::from_value(s, i))
                .collect::<Result<_, _>>()?,
        })
    }

    /// IAM's decision for `action` on `resource`, for a request naming no attributes.
    pub fn evaluate(&self, action: &str, resource: &str) -> Decision {
        self.evaluate_with(action, resource, &[])
    }

    /// IAM's decision for `action` on `resource` for a request whose
    /// `dynamodb:Attributes` are `attributes` (empty: the request names none, and a
    /// statement conditioned on them does not allow it).
    pub fn evaluate_with(&self, action: &str, resource: &str, attributes: &[String]) -> Decision {
        if let Some(deny) = self
            .statements
            .iter()
            .find(|s| s.effect == Effect::Deny && s.applies(action, resource))
        {
            return Decision::ExplicitDeny {
                by: deny.sid.clone(),
            };
        }
        let applying: Vec<&Statement> = self
            .statements
            .iter()
            .filter(|s| s.effect == Effect::Allow && s.applies(action, resource))
            .collect();
        let decided = |s: &Statement| match &s.allowed_attributes {
            None => !s.conditional,
            Some(allowed) => {
                !attributes.is_empty() && attributes.iter().all(|a| allowed.contains(a))
            }
        };
        let by: Vec<String> = applying
            .iter()
            .filter(|s| decided(s))
            .map(|s| s.sid.clone())
            .collect();
        if by.is_empty() {
            Decision::ImplicitDeny {
                conditional: applying
                    .iter()
                    .filter(|s| s.conditional || s.allowed_attributes.is_some())
                    .map(|s| s.sid.clone())
                    .collect(),
            }
        } else {
            Decision::Allowed { by }
        }
    }

    /// Every grant of the `Allow` statements: each action pattern with each resource
    /// pattern (one grant for a `NotAction` / `NotResource` statement's whole list).
    pub fn grants(&self) -> Vec<Grant> {
        let mut out = Vec::new();
        for (index, s) in self.statements.iter().enumerate() {
            if s.effect != Effect::Allow {
                continue;
            }
            let actions = if s.not_action {
                vec![format!("NotAction {:?}", s.actions)]
            } else {
                s.actions.clone()
            };
            let resources = if s.not_resource {
                vec![format!("NotResource {:?}", s.resources)]
            } else {
                s.resources.clone()
            };
            for action in &actions {
                for resource in &resources {
                    out.push(Grant {
                        statement: index,
                        sid: s.sid.clone(),
                        action: action.clone(),
                        resource: resource.clone(),
                    });
                }
            }
        }
        out
    }

    /// Whether `grant` (one of [`Policy::grants`]) covers the request.
    pub fn grant_covers(&self, grant: &Grant, action: &str, resource: &str) -> bool {
        let Some(statement) = self.statements.get(grant.statement) else {
            return false;
        };
        let action_ok = if statement.not_action {
            statement.matches_action(action)
        } else {
            wildcard_match(&grant.action, action, true)
        };
        let resource_ok = if statement.not_resource {
            statement.matches_resource(resource)
        } else {
            wildcard_match(&grant.resource, resource, false)
        };
        action_ok && resource_ok
    }
}

/// A function of a template as IAM sees it: its role's policies and what its event
/// sources and logging need.
#[derive(Debug, Clone)]
pub struct FunctionWiring {
    /// The template file name.
    pub template: String,
    /// The function's logical id.
    pub logical_id: String,
    /// The role's logical id.
    pub role: String,
    /// Every statement of every policy attached to the role.
    pub policy: Policy,
    /// ARNs of the queues its SQS event source mappings read.
    pub sqs_sources: Vec<String>,
    /// ARNs of the streams its DynamoDB event source mappings read.
    pub stream_sources: Vec<String>,
    /// ARNs of the queues its mappings send a batch they gave up on
    /// (`DestinationConfig.OnFailure`), with the function's role.
    pub failure_destinations: Vec<String>,
    /// Its log group's ARN (`LoggingConfig.LogGroup`), if it names one.
    pub log_group_arn: Option<String>,
}

/// The wiring of the function whose binary (`Metadata.BuildProperties.Binary`) is
/// `binary`, resolved under the template's parameters.
pub fn function_wiring(
    template: &StackTemplate,
    binary: &str,
) -> Result<FunctionWiring, LocalAwsError> {
    let logical_id = template.function(binary)?.logical_id;
    let function = template.resource(&logical_id)?;
    let props = function
        .get("Properties")
        .ok_or_else(|| template.error(format!("{logical_id} has no Properties")))?;
    if props.get("Policies").is_some() {
        return Err(template.error(format!(
            "{logical_id}: SAM Policies (policy templates) are not expanded by this evaluator; \
             give the function an explicit Role, or teach crates/dev/local-aws/src/iam.rs the template"
        )));
    }
    let role = match props.get("Role") {
        Some(Value::Tagged(t)) if t.tag == "GetAtt" => t.value.as_str().map(str::to_string),
        Some(Value::Mapping(m)) => m.get("Fn::GetAtt").and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Sequence(items) => items
                .first()
                .and_then(Value::as_str)
                .map(|r| format!("{r}.Arn")),
            _ => None,
        }),
        _ => None,
    }
    .and_then(|s| s.strip_suffix(".Arn").map(str::to_string))
    .ok_or_else(|| {
        template.error(format!(
            "{logical_id}: Role must be !GetAtt <Role>.Arn of a role in this template"
        ))
    })?;
    let policy = role_policy(template, &role)?;

    let mut sqs_sources = Vec::new();
    let mut stream_sources = Vec::new();
    let mut failure_destinations = Vec::new();
    if let Some(Value::Mapping(events)) = props.get("Events") {
        for (name, event) in events {
            let name = name.as_str().unwrap_or_default();
            let kind = event
                .get("Type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match kind {
                "SQS" => {
                    let queue = event
                        .get("Properties")
                        .and_then(|p| p.get("Queue"))
                        .ok_or_else(|| {
                            template.error(format!("{logical_id} event {name}: no Queue"))
                        })?;
                    sqs_sources
                        .push(template.string(queue, &format!("{logical_id} event {name}"))?);
                }
                "DynamoDB" => {
                    let what = format!("{logical_id} event {name}");
                    let properties = event.get("Properties");
                    let stream = properties
                        .and_then(|p| p.get("Stream"))
                        .ok_or_else(|| template.error(format!("{what}: no Stream")))?;
                    stream_sources.push(template.string(stream, &what)?);
                    if let Some(destination) = properties
                        .and_then(|p| p.get("DestinationConfig"))
                        .and_then(|d| d.get("OnFailure"))
                        .and_then(|o| o.get("Destination"))
                    {
                        failure_destinations.push(template.string(destination, &what)?);
                    }
                }
                "Schedule" | "ScheduleV2" | "Api" | "HttpApi" | "EventBridgeRule" => {}
                other => {
                    return Err(template.error(format!(
                        "{logical_id} event {name}: the evaluator does not know what a {other} \
                         event source needs of the role"
                    )));
                }
            }
        }
    }
    let log_group_arn = match props.get("LoggingConfig").and_then(|l| l.get("LogGroup")) {
        Some(value) => {
            let name = template.string(value, &format!("{logical_id} LoggingConfig.LogGroup"))?;
            Some(format!(
                "arn:{}:logs:{}:{}:log-group:{name}",
                template.parameter("AWS::Partition").unwrap_or("aws"),
                template.parameter("AWS::Region").unwrap_or_default(),
                template.parameter("AWS::AccountId").unwrap_or_default(),
            ))
        }
        None => None,
    };
    Ok(FunctionWiring {
        template: template.name(),
        logical_id,
        role,
        policy,
        sqs_sources,
        stream_sources,
        failure_destinations,
        log_group_arn,
    })
}

/// Every statement of the role's inline policies and of the `AWS::IAM::Policy`
/// resources attached to it.
fn role_policy(template: &StackTemplate, role: &str) -> Result<Policy, LocalAwsError> {
    let resource = template.resource(role)?;
    if template.resource_type(role)? != "AWS::IAM::Role" {
        return Err(template.error(format!("{role} is not an AWS::IAM::Role")));
    }
    let props = resource
        .get("Properties")
        .ok_or_else(|| template.error(format!("{role} has no Properties")))?;
    let resolved = template
        .resolve(props)?
        .ok_or_else(|| template.error(format!("{role} Properties resolve to nothing")))?;
    if resolved.get("ManagedPolicyArns").is_some() {
        return Err(template.error(format!(
            "{role}: ManagedPolicyArns cannot be evaluated here; use inline policies"
        )));
    }
    if resolved.get("PermissionsBoundary").is_some() {
        return Err(template.error(format!(
            "{role}: a permissions boundary is set under these parameters; the evaluator \
             cannot read it (evaluate with PermissionsBoundaryArn empty)"
        )));
    }
    let mut documents = Vec::new();
    if let Some(Value::Sequence(policies)) = resolved.get("Policies") {
        for p in policies {
            documents.push(p.get("PolicyDocument").cloned().ok_or_else(|| {
                template.error(format!("{role}: a policy without PolicyDocument"))
            })?);
        }
    }
    let role_name = template.reference(role)?;
    for (logical_id, r) in template.resources() {
        if r.get("Type").and_then(Value::as_str) != Some("AWS::IAM::Policy")
            || !template.is_deployed(&logical_id)?
        {
            continue;
        }
        let Some(props) = r.get("Properties") else {
            continue;
        };
        let roles = match props.get("Roles") {
            Some(v) => template.strings(v, &format!("{logical_id} Roles"))?,
            None => Vec::new(),
        };
        if roles.contains(&role_name)
            && let Some(document) = props.get("PolicyDocument")
            && let Some(document) = template.resolve(document)?
        {
            documents.push(document);
        }
    }
    let mut policy = Policy::default();
    for document in &documents {
        let mut p =
            Policy::from_document(document).map_err(|e| template.error(format!("{role}: {e}")))?;
        policy.statements.append(&mut p.statements);
    }
    Ok(policy)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Policy {
        Policy::from_document(&serde_norway::from_str(yaml).unwrap()).unwrap()
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
"#,
        );
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches!(
            p.evaluate_with("dynamodb:UpdateItem", "t", &names(&["pk", "sk", "a"])),
            Decision::Allowed { .. }
        ));
        // One attribute more, or no attributes known: not allowed.
        assert_eq!(
            p.evaluate_with("dynamodb:UpdateItem", "t", &names(&["pk", "sk", "a", "b"])),
            Decision::ImplicitDeny {
                conditional: vec!["FewAttributes".into()]
            }
        );
        assert!(matches!(
            p.evaluate("dynamodb:UpdateItem", "t"),
            Decision::ImplicitDeny { .. }
        ));
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
}
