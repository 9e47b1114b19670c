//! Running a batch's independent store calls together (25 claims, then 25 outcome
//! writes): at DynamoDB latencies one after another they would take longer than the
//! 100 ms between `BatchMeterUsage` calls, and the submitter would fall below the quota.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Polls every future to completion concurrently (on the current task) and returns
/// their outputs in input order.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Barrier;

    #[tokio::test]
    async fn runs_together_and_keeps_order() {
        // Each future waits until all 25 are waiting: only concurrent polling finishes.
        let barrier = Arc::new(Barrier::new(25));
        let futures: Vec<_> = (0..25u64)
            .map(|i| {
                let barrier = barrier.clone();
                async move {
                    barrier.wait().await;
                    i
                }
            })
            .collect();
        let outputs = tokio::time::timeout(std::time::Duration::from_secs(10), join_all(futures))
            .await
            .expect("the futures ran together");
        assert_eq!(outputs, (0..25).collect::<Vec<_>>());
    }
}
