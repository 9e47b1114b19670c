//! A small IAM policy evaluator over the policies of the stack templates, for the IAM
//! contract test: what a function's role allows, read from the template exactly as it
//! deploys ([`crate::cfn::StackTemplate`] resolves the intrinsics), what a resource's
//! own policy (a table's `ResourcePolicy`, a key's `KeyPolicy`) allows or denies whom,
//! and whether one request (an action on a resource, with its request context) is
//! allowed.
//!
//! Evaluation follows IAM's logic: an explicit `Deny` that applies wins; otherwise an
//! `Allow` that applies allows; otherwise the request is implicitly denied. A statement
//! applies when its `Action` matches (or `NotAction` does not), its `Resource` matches
//! (or `NotResource` does not), its `Principal` names the caller (resource policies
//! only) and every one of its conditions holds in the request's context
//! ([`Context`]). Actions match case-insensitively, resources case-sensitively, both
//! with the `*` and `?` wildcards.
//!
//! Conditions are decided as IAM documents them: the string, ARN and `Bool` operators,
//! their `Not` forms, `...IfExists`, `Null`, and the `ForAllValues:` / `ForAnyValue:`
//! set forms. A key the request does not carry makes a positive operator false, a
//! negated one true, an `IfExists` one true, `ForAllValues:` true and `ForAnyValue:`
//! false. An operator this evaluator does not know cannot be decided: an `Allow` with
//! one never allows and a `Deny` with one always denies (the strict reading), so a grant
//! that depends on it is reported as missing rather than assumed.
//!
//! What the evaluator cannot read is an error, never an assumption: SAM policy
//! templates (`Policies` on a function), `ManagedPolicyArns`, a permissions boundary.

use std::collections::BTreeMap;

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

/// The request context conditions read: condition key (any case) -> its values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    keys: BTreeMap<String, Vec<String>>,
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Context::default()
    }

    /// `key` carries `values` (condition keys are case-insensitive).
    pub fn with(mut self, key: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.keys.insert(
            key.to_ascii_lowercase(),
            values.into_iter().map(Into::into).collect(),
        );
        self
    }

    fn get(&self, key: &str) -> Option<&[String]> {
        self.keys.get(&key.to_ascii_lowercase()).map(Vec::as_slice)
    }
}

/// How a condition treats a multivalued key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOperator {
    /// A single-valued comparison.
    Single,
    /// `ForAllValues:`: every value of the request matches one of the policy's.
    ForAll,
    /// `ForAnyValue:`: some value of the request matches one of the policy's.
    ForAny,
}

/// One condition: an operator on one key against the policy's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The operator as written (`ForAllValues:StringEquals`, `BoolIfExists`, ...).
    pub operator: String,
    /// The condition key.
    pub key: String,
    /// The policy's values.
    pub values: Vec<String>,
}

impl Condition {
    /// Whether the condition holds for `context`; `None` when its operator is unknown.
    pub fn holds(&self, context: &Context) -> Option<bool> {
        let (set, rest) = match self.operator.split_once(':') {
            Some(("ForAllValues", rest)) => (SetOperator::ForAll, rest),
            Some(("ForAnyValue", rest)) => (SetOperator::ForAny, rest),
            Some(_) => return None,
            None => (SetOperator::Single, self.operator.as_str()),
        };
        let (base, if_exists) = match rest.strip_suffix("IfExists") {
            Some(base) => (base, true),
            None => (rest, false),
        };
        let present = context.get(&self.key).filter(|v| !v.is_empty());
        if base == "Null" {
            let wants_absent = self.values.iter().any(|v| v.eq_ignore_ascii_case("true"));
            return Some(present.is_none() == wants_absent);
        }
        let (matcher, negated): (fn(&str, &str) -> bool, bool) = match base {
            "StringEquals" => (|p, v| p == v, false),
            "StringNotEquals" => (|p, v| p == v, true),
            "StringEqualsIgnoreCase" => (|p, v| p.eq_ignore_ascii_case(v), false),
            "StringNotEqualsIgnoreCase" => (|p, v| p.eq_ignore_ascii_case(v), true),
            "StringLike" | "ArnLike" | "ArnEquals" => (|p, v| wildcard_match(p, v, false), false),
            "StringNotLike" | "ArnNotLike" | "ArnNotEquals" => {
                (|p, v| wildcard_match(p, v, false), true)
            }
            "Bool" => (|p, v| p.eq_ignore_ascii_case(v), false),
            _ => return None,
        };
        let Some(values) = present else {
            return Some(match set {
                SetOperator::ForAll => true,
                SetOperator::ForAny => false,
                SetOperator::Single => if_exists || negated,
            });
        };
        let matches = |v: &String| self.values.iter().any(|p| matcher(p, v));
        Some(match set {
            SetOperator::ForAll => values.iter().all(|v| matches(v) != negated),
            SetOperator::ForAny => values.iter().any(|v| matches(v) != negated),
            SetOperator::Single => values.iter().any(matches) != negated,
        })
    }

    fn read(condition: &Value, sid: &str) -> Result<Vec<Condition>, String> {
        let Some(operators) = condition.as_mapping() else {
            return Err(format!("statement {sid}: Condition is not a map"));
        };
        let mut out = Vec::new();
        for (operator, keys) in operators {
            let operator = operator
                .as_str()
                .ok_or_else(|| format!("statement {sid}: condition operator {operator:?}"))?;
            let keys = keys
                .as_mapping()
                .ok_or_else(|| format!("statement {sid}: {operator} is not a map"))?;
            for (key, values) in keys {
                let key = key
                    .as_str()
                    .ok_or_else(|| format!("statement {sid}: {operator} key {key:?}"))?;
                out.push(Condition {
                    operator: operator.to_string(),
                    key: key.to_string(),
                    values: strings(values)
                        .ok_or_else(|| format!("statement {sid}: {operator} {key} values"))?,
                });
            }
        }
        Ok(out)
    }
}

/// A string, a number or a boolean as text; a list of them.
fn strings(value: &Value) -> Option<Vec<String>> {
    let one = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match value {
        Value::Sequence(items) => items.iter().map(one).collect(),
        other => one(other).map(|s| vec![s]),
    }
}

/// Whom a resource policy's statement names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// `"*"` or `{AWS: "*"}`: anyone.
    Anyone,
    /// `{AWS: arn}`: a role or user ARN, or an account (`arn:...:root`).
    Aws(String),
    /// `{Service: name}`: an AWS service.
    Service(String),
}

impl Principal {
    fn read(value: &Value, sid: &str) -> Result<Vec<Principal>, String> {
        match value {
            Value::String(s) if s == "*" => Ok(vec![Principal::Anyone]),
            Value::Mapping(map) => {
                let mut out = Vec::new();
                for (kind, names) in map {
                    let names = strings(names)
                        .ok_or_else(|| format!("statement {sid}: Principal {kind:?}"))?;
                    for name in names {
                        out.push(match kind.as_str() {
                            Some("AWS") if name == "*" => Principal::Anyone,
                            Some("AWS") => Principal::Aws(name),
                            Some("Service") => Principal::Service(name),
                            other => {
                                return Err(format!("statement {sid}: Principal kind {other:?}"));
                            }
                        });
                    }
                }
                Ok(out)
            }
            other => Err(format!("statement {sid}: Principal {other:?}")),
        }
    }

    /// Whether this names the caller `principal_arn` (a role's ARN or a service name).
    /// An account (`arn:...:iam::ACCOUNT:root`) names every principal of that account.
    fn names(&self, principal_arn: &str) -> bool {
        match self {
            Principal::Anyone => true,
            Principal::Service(name) => name == principal_arn,
            Principal::Aws(arn) => match arn.strip_suffix(":root") {
                Some(account_prefix) => principal_arn
                    .strip_prefix(account_prefix)
                    .is_some_and(|rest| rest.starts_with(':')),
                None => arn == principal_arn,
            },
        }
    }
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
    /// `Principal` of a resource policy's statement; `None` in an identity policy.
    pub principals: Option<Vec<Principal>>,
    /// Its conditions, all of which must hold.
    pub conditions: Vec<Condition>,
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

    /// Whether the statement covers the request, conditions aside.
    pub fn applies(&self, action: &str, resource: &str) -> bool {
        self.matches_action(action) && self.matches_resource(resource)
    }

    /// Whether its conditions hold: `Some(true)`, `Some(false)`, or `None` when one
    /// cannot be decided (an operator this evaluator does not know).
    pub fn conditions_hold(&self, context: &Context) -> Option<bool> {
        let mut all = Some(true);
        for condition in &self.conditions {
            match condition.holds(context) {
                Some(true) => {}
                Some(false) => return Some(false),
                None => all = None,
            }
        }
        all
    }

    /// Reads a resolved statement of an identity policy (`resource_policy` false: a
    /// `Principal` is an error) or of a resource policy (a `Principal` is required).
    pub fn from_value(
        value: &Value,
        index: usize,
        resource_policy: bool,
    ) -> Result<Statement, String> {
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
                Some(v) => strings(v)
                    .map(Some)
                    .ok_or_else(|| format!("statement {sid}: {key} {v:?}")),
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
        if value.get("NotPrincipal").is_some() {
            return Err(format!("statement {sid}: NotPrincipal is not read here"));
        }
        let principals = match (value.get("Principal"), resource_policy) {
            (Some(p), true) => Some(Principal::read(p, &sid)?),
            (None, false) => None,
            (Some(_), false) => {
                return Err(format!(
                    "statement {sid}: a Principal has no place in an identity policy"
                ));
            }
            (None, true) => {
                return Err(format!(
                    "statement {sid}: a resource policy's statement needs a Principal"
                ));
            }
        };
        let conditions = match value.get("Condition") {
            Some(c) => Condition::read(c, &sid)?,
            None => Vec::new(),
        };
        Ok(Statement {
            sid,
            effect,
            actions,
            not_action,
            resources,
            not_resource,
            principals,
            conditions,
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
        /// Sids of `Allow` statements that would apply but whose conditions do not
        /// hold (or cannot be decided).
        conditional: Vec<String>,
    },
    /// A `Deny` statement applies.
    ExplicitDeny {
        /// Its sid.
        by: String,
    },
}

impl Decision {
    /// Whether the request is allowed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    /// A same-account request under an identity policy and a resource policy: an
    /// explicit deny in either wins, then an allow in either allows.
    pub fn with_resource_policy(self, resource: Decision) -> Decision {
        match (self, resource) {
            (deny @ Decision::ExplicitDeny { .. }, _)
            | (_, deny @ Decision::ExplicitDeny { .. }) => deny,
            (allowed @ Decision::Allowed { .. }, _) | (_, allowed @ Decision::Allowed { .. }) => {
                allowed
            }
            (
                Decision::ImplicitDeny { mut conditional },
                Decision::ImplicitDeny { conditional: more },
            ) => {
                conditional.extend(more);
                Decision::ImplicitDeny { conditional }
            }
        }
    }
}

/// KMS's decision for `principal_arn` calling `action` on a key: the key policy
/// decides. A `Deny` in it wins; a statement naming the caller allows; a statement
/// naming only the caller's account (`...:root`) delegates to IAM, so it allows when
/// `identity` (the caller's own policy) allows too.
pub fn key_decision(
    key_policy: &Policy,
    identity: &Policy,
    principal_arn: &str,
    action: &str,
    key_arn: &str,
    context: &Context,
) -> Decision {
    let decision = key_policy.evaluate_for(principal_arn, action, key_arn, context);
    let Decision::Allowed { by } = &decision else {
        return decision;
    };
    let direct = key_policy.statements.iter().any(|s| {
        by.contains(&s.sid)
            && s.principals.as_ref().is_some_and(|ps| {
                ps.iter().any(|p| match p {
                    Principal::Aws(arn) => arn == principal_arn,
                    Principal::Service(name) => name == principal_arn,
                    Principal::Anyone => true,
                })
            })
    });
    if direct || identity.evaluate_in(action, key_arn, context).is_allowed() {
        decision
    } else {
        Decision::ImplicitDeny {
            conditional: by.clone(),
        }
    }
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

/// The statements of every policy of one role, or of one resource's policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// In document order.
    pub statements: Vec<Statement>,
}

impl Policy {
    /// Reads a resolved identity-policy document (`{Version, Statement}`).
    pub fn from_document(document: &Value) -> Result<Policy, String> {
        Policy::read(document, false)
    }

    /// Reads an identity policy written as YAML (or JSON) text.
    pub fn from_yaml(text: &str) -> Result<Policy, String> {
        let document: Value = serde_norway::from_str(text).map_err(|e| e.to_string())?;
        Policy::from_document(&document)
    }

    /// Reads a resolved resource-policy document: every statement names its `Principal`.
    pub fn from_resource_document(document: &Value) -> Result<Policy, String> {
        Policy::read(document, true)
    }

    fn read(document: &Value, resource_policy: bool) -> Result<Policy, String> {
        let statements = match document.get("Statement") {
            Some(Value::Sequence(items)) => items.iter().collect::<Vec<_>>(),
            Some(single @ Value::Mapping(_)) => vec![single],
            other => return Err(format!("policy document Statement {other:?}")),
        };
        Ok(Policy {
            statements: statements
                .into_iter()
                .enumerate()
                .map(|(i, s)| Statement::from_value(s, i, resource_policy))
                .collect::<Result<_, _>>()?,
        })
    }

    /// IAM's decision for `action` on `resource` with an empty request context.
    pub fn evaluate(&self, action: &str, resource: &str) -> Decision {
        self.evaluate_in(action, resource, &Context::new())
    }

    /// IAM's decision for `action` on `resource` in `context`, under an identity
    /// policy (every statement's `Principal` is ignored: there is none).
    pub fn evaluate_in(&self, action: &str, resource: &str, context: &Context) -> Decision {
        self.decide(action, resource, context, |_| true)
    }

    /// A resource policy's decision for `principal_arn` (a role ARN, or a service
    /// name) calling `action` on `resource` in `context`: only statements whose
    /// `Principal` names the caller apply.
    pub fn evaluate_for(
        &self,
        principal_arn: &str,
        action: &str,
        resource: &str,
        context: &Context,
    ) -> Decision {
        self.decide(action, resource, context, |s| {
            s.principals
                .as_ref()
                .is_some_and(|ps| ps.iter().any(|p| p.names(principal_arn)))
        })
    }

    fn decide(
        &self,
        action: &str,
        resource: &str,
        context: &Context,
        names_caller: impl Fn(&Statement) -> bool,
    ) -> Decision {
        let names_caller = &names_caller;
        let applying = |effect: Effect| {
            self.statements.iter().filter(move |s| {
                s.effect == effect && s.applies(action, resource) && names_caller(s)
            })
        };
        // A Deny whose conditions cannot be decided denies (the strict reading).
        if let Some(deny) =
            applying(Effect::Deny).find(|s| s.conditions_hold(context) != Some(false))
        {
            return Decision::ExplicitDeny {
                by: deny.sid.clone(),
            };
        }
        let (by, conditional): (Vec<&Statement>, Vec<&Statement>) =
            applying(Effect::Allow).partition(|s| s.conditions_hold(context) == Some(true));
        if by.is_empty() {
            Decision::ImplicitDeny {
                conditional: conditional.iter().map(|s| s.sid.clone()).collect(),
            }
        } else {
            Decision::Allowed {
                by: by.iter().map(|s| s.sid.clone()).collect(),
            }
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

/// A resource's own policy, as the template deploys it.
#[derive(Debug, Clone)]
pub struct ResourcePolicy {
    /// The resource's logical id.
    pub logical_id: String,
    /// The ARN a request names it by (`GetAtt Arn`; a table's indexes are under it).
    pub arn: String,
    /// Its statements.
    pub policy: Policy,
}

impl ResourcePolicy {
    /// Whether a request on `resource` is governed by this policy (the resource, or
    /// one of its indexes or streams).
    pub fn governs(&self, resource: &str) -> bool {
        resource == self.arn
            || resource
                .strip_prefix(&self.arn)
                .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Every deployed table's `ResourcePolicy`, KMS key's `KeyPolicy`, queue policy
/// (`AWS::SQS::QueuePolicy`, one entry per queue it is attached to) and event bus
/// policy statement (`AWS::Events::EventBusPolicy`, governing the bus its `Resource`
/// names) of `template` under its parameters.
pub fn resource_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = queue_policies(template)?;
    out.extend(bus_policies(template)?);
    for (logical_id, resource) in template.resources() {
        let path: &[&str] = match resource.get("Type").and_then(Value::as_str) {
            Some("AWS::DynamoDB::Table") => &["ResourcePolicy", "PolicyDocument"],
            Some("AWS::KMS::Key") => &["KeyPolicy"],
            _ => continue,
        };
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let mut document = resource.get("Properties");
        for key in path {
            document = document.and_then(|d| d.get(*key));
        }
        let Some(document) = document else { continue };
        let Some(document) = template.resolve(document)? else {
            continue;
        };
        let policy = Policy::from_resource_document(&document)
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        out.push(ResourcePolicy {
            arn: template.attribute(&logical_id, "Arn")?,
            logical_id,
            policy,
        });
    }
    Ok(out)
}

/// Each deployed `AWS::Events::EventBusPolicy` in its `Statement` form: one statement
/// of the bus's policy, governing the bus its `Resource` names.
fn bus_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = Vec::new();
    for (logical_id, resource) in template.resources_of_type("AWS::Events::EventBusPolicy") {
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let Some(statement) = resource.get("Properties").and_then(|p| p.get("Statement")) else {
            return Err(template.error(format!(
                "{logical_id}: only the Statement form is read (not Action/Principal)"
            )));
        };
        let Some(statement) = template.resolve(statement)? else {
            continue;
        };
        let bus = statement
            .get("Resource")
            .and_then(Value::as_str)
            .ok_or_else(|| template.error(format!("{logical_id}: Statement needs one Resource")))?
            .to_string();
        let mut document = serde_norway::Mapping::new();
        document.insert(Value::from("Statement"), statement);
        let policy = Policy::from_resource_document(&Value::Mapping(document))
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        out.push(ResourcePolicy {
            logical_id,
            arn: bus,
            policy,
        });
    }
    Ok(out)
}

/// Each deployed `AWS::SQS::QueuePolicy`, once per queue of its `Queues` (URLs, which
/// name the template's queues by their `Ref`).
fn queue_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = Vec::new();
    let queues = template.resources_of_type("AWS::SQS::Queue");
    for (logical_id, resource) in template.resources_of_type("AWS::SQS::QueuePolicy") {
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let props = resource.get("Properties");
        let (Some(urls), Some(document)) = (
            props.and_then(|p| p.get("Queues")),
            props.and_then(|p| p.get("PolicyDocument")),
        ) else {
            return Err(template.error(format!("{logical_id}: needs Queues and PolicyDocument")));
        };
        let urls = template.strings(urls, &format!("{logical_id} Queues"))?;
        let Some(document) = template.resolve(document)? else {
            continue;
        };
        let policy = Policy::from_resource_document(&document)
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        for url in urls {
            let queue = queues
                .iter()
                .find(|(id, _)| template.reference(id).is_ok_and(|r| r == url))
                .ok_or_else(|| {
                    template.error(format!("{logical_id}: queue {url} is not in the template"))
                })?;
            out.push(ResourcePolicy {
                logical_id: logical_id.clone(),
                arn: template.attribute(&queue.0, "Arn")?,
                policy: policy.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
        let decide = |who: &str, action: &str, context: &Context| {
            table.evaluate_for(who, action, "t", context)
        };
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
}
