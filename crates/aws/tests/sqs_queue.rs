//! `SqsWorkQueue` against moto: batches of ten and within the batch payload limit,
//! bodies that parse back, refused messages reported by index, a missing queue as an
//! error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use awsmp_aws::{SqsWorkQueue, parse_work_message};
use awsmp_core::charges::{PriceBasis, UnitPrice};
use awsmp_core::model::{GroupKey, ReasonCode};
use awsmp_core::ports::{PortError, WorkMessage, WorkQueue};
use awsmp_local_aws::{MotoServer, create_queue};
use common::*;

fn aggregate(i: usize) -> WorkMessage {
    WorkMessage::Aggregate {
        group: GroupKey {
            dimension: format!("dim{i}"),
            ..group("x", "2026-11-30T10")
        },
        flush: i.is_multiple_of(2),
        // Some carry a unit price: it travels as JSON, its decimal exact.
        price: i.is_multiple_of(3).then(|| UnitPrice {
            agreement_id: "agmt-1".into(),
            basis: PriceBasis::Priced {
                price: "0.0001234".parse().unwrap(),
                currency: "USD".into(),
            },
        }),
    }
}

async fn receive_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<WorkMessage> {
    let mut got = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            return got;
        }
        for m in out.messages() {
            got.push(parse_work_message(m.body().unwrap()).unwrap());
        }
    }
}

#[tokio::test]
async fn twenty_five_messages_go_in_three_batches_and_parse_back() {
    let moto = MotoServer::start().await.unwrap();
    let sqs = moto.sqs();
    let url = create_queue(&sqs, "work").await.unwrap();
    let queue = SqsWorkQueue::new(sqs.clone(), &url);
    let mut messages: Vec<WorkMessage> = (0..24).map(aggregate).collect();
    messages.push(WorkMessage::Cleanup {
        group: group("requests", "2026-11-30T10"),
        aggregated: vec!["a".into(), "b".into()],
        rejected: vec![("c".into(), ReasonCode::TooManyTags)],
    });
    let report = queue.send(&messages).await.unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let mut received = receive_all(&sqs, &url).await;
    assert_eq!(received.len(), 25);
    let key = |m: &WorkMessage| serde_json::to_string(m).unwrap();
    received.sort_by_key(key);
    messages.sort_by_key(key);
    assert_eq!(received, messages);
}

#[tokio::test]
async fn an_oversized_message_is_reported_by_index_and_the_rest_are_sent() {
    let moto = MotoServer::start().await.unwrap();
    let sqs = moto.sqs();
    let url = create_queue(&sqs, "work").await.unwrap();
    let queue = SqsWorkQueue::new(sqs.clone(), &url);
    let huge = WorkMessage::Cleanup {
        group: group("requests", "2026-11-30T10"),
        aggregated: vec!["k".repeat(1024); 300],
        rejected: vec![],
    };
    let messages = vec![aggregate(0), huge, aggregate(2)];
    let report = queue.send(&messages).await.unwrap();
    assert_eq!(report.failed, vec![1]);
    assert_eq!(receive_all(&sqs, &url).await.len(), 2);
}

/// A cleanup message of about `kib` KiB (its list of row keys).
fn cleanup_of_kib(i: usize, kib: usize) -> WorkMessage {
    WorkMessage::Cleanup {
        group: GroupKey {
            dimension: format!("dim{i}"),
            ..group("x", "2026-11-30T10")
        },
        aggregated: vec!["k".repeat(1021); kib],
        rejected: vec![],
    }
}

#[tokio::test]
async fn batches_are_split_by_total_payload_size_too() {
    // Ten messages of ~200 KiB each: every one fits the 256 KiB message limit, but ten
    // in one SendMessageBatch are ~2 MB, over the batch payload limit (256 KiB on SQS;
    // moto refuses beyond 1 MiB with BatchRequestTooLong). Split by bytes, all arrive.
    let moto = MotoServer::start().await.unwrap();
    let sqs = moto.sqs();
    let url = create_queue(&sqs, "work").await.unwrap();
    let queue = SqsWorkQueue::new(sqs.clone(), &url);
    let mut messages: Vec<WorkMessage> = (0..10).map(|i| cleanup_of_kib(i, 200)).collect();
    for message in &messages {
        let bytes = serde_json::to_string(message).unwrap().len();
        assert!((200 * 1024..awsmp_aws::sqs::SQS_MAX_BODY_BYTES).contains(&bytes));
    }
    // Small ones in between share requests with whatever still fits.
    messages.insert(3, aggregate(100));
    messages.push(aggregate(101));

    let report = queue.send(&messages).await.unwrap();

    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let mut received = receive_all(&sqs, &url).await;
    let key = |m: &WorkMessage| serde_json::to_string(m).unwrap();
    received.sort_by_key(key);
    messages.sort_by_key(key);
    assert_eq!(received.len(), 12);
    assert_eq!(received, messages);
}

#[tokio::test]
async fn an_oversized_message_among_large_ones_is_reported_not_dropped() {
    let moto = MotoServer::start().await.unwrap();
    let sqs = moto.sqs();
    let url = create_queue(&sqs, "work").await.unwrap();
    let queue = SqsWorkQueue::new(sqs.clone(), &url);
    // Over 256 KiB alone (moto itself would take it: its limit is 1 MiB).
    let messages = vec![
        cleanup_of_kib(0, 200),
        cleanup_of_kib(1, 300),
        cleanup_of_kib(2, 200),
    ];
    let report = queue.send(&messages).await.unwrap();
    assert_eq!(report.failed, vec![1]);
    assert_eq!(receive_all(&sqs, &url).await.len(), 2);
}

#[tokio::test]
async fn a_missing_queue_fails_the_send() {
    let moto = MotoServer::start().await.unwrap();
    let queue = SqsWorkQueue::new(
        moto.sqs(),
        format!("{}/123456789012/does-not-exist", moto.endpoint()),
    );
    let err = queue.send(&[aggregate(0)]).await.unwrap_err();
    assert!(matches!(err, PortError::Failed { .. }), "{err:?}");
    assert!(queue.send(&[]).await.unwrap().failed.is_empty());
}
