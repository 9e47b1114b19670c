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
//!
//! The evaluator is here; reading the stacks' role and resource policies out of the
//! templates is `stack.rs`.

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

mod stack;
pub use stack::{FunctionWiring, ResourcePolicy, function_wiring, resource_policies};

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
