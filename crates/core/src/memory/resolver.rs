//! [`CustomerResolver`] in memory: answers from a token map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{CustomerResolver, ResolveError, ResolvedCustomer};
use crate::sync::lock;

/// [`CustomerResolver`] from a token -> result map; an unknown token is
/// [`ResolveError::InvalidToken`], as the service answers.
#[derive(Debug, Clone, Default)]
pub struct MemoryCustomerResolver {
    answers: Arc<Mutex<HashMap<String, Result<ResolvedCustomer, ResolveError>>>>,
    calls: Arc<Mutex<usize>>,
}

impl MemoryCustomerResolver {
    /// A resolver that knows no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `token` with `answer` from now on.
    pub fn insert(&self, token: &str, answer: Result<ResolvedCustomer, ResolveError>) {
        lock(&self.answers).insert(token.to_string(), answer);
    }

    /// Number of `resolve` calls so far.
    pub fn calls(&self) -> usize {
        *lock(&self.calls)
    }
}

#[async_trait]
impl CustomerResolver for MemoryCustomerResolver {
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError> {
        *lock(&self.calls) += 1;
        lock(&self.answers)
            .get(token)
            .cloned()
            .unwrap_or(Err(ResolveError::InvalidToken))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    #[tokio::test]
    async fn customer_resolver_answers_from_its_map() {
        let resolver = MemoryCustomerResolver::new();
        let customer = ResolvedCustomer {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: "prod".into(),
        };
        resolver.insert("good", Ok(customer.clone()));
        resolver.insert("old", Err(ResolveError::ExpiredToken));
        assert_eq!(resolver.resolve("good").await, Ok(customer));
        assert_eq!(
            resolver.resolve("old").await,
            Err(ResolveError::ExpiredToken)
        );
        assert_eq!(
            resolver.resolve("unknown").await,
            Err(ResolveError::InvalidToken)
        );
        assert_eq!(resolver.calls(), 3);
    }
}
