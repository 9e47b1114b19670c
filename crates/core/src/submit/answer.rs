//! Reading a `BatchMeterUsage` answer into one verdict per record sent: results come
//! back in any order and are matched to the records by identity (account, license,
//! dimension, timestamp). Only `UnprocessedRecords` says a record was not processed; a
//! record the answer leaves unclear (missing from both lists, a status AWS does not
//! document, a result that does not echo the quantity sent) may have been billed, so it
//! is [`RecordVerdict::Ambiguous`]. Pure: the SDK adapter and the simulation's
//! Marketplace both read their answers here.

use std::collections::{HashMap, VecDeque};

use crate::ports::{
    CONNECT_FAILURE, MeteringError, MeteringRecord, REFUSAL_EXCEPTIONS, RecordVerdict,
    UnclearAnswer, VALIDATION_EXCEPTIONS,
};

/// What identifies a record in `Results` and `UnprocessedRecords`.
type Identity = (String, String, String, i64);

/// A usage record as the answer echoes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoedRecord {
    /// `CustomerAWSAccountId`.
    pub account: String,
    /// `LicenseArn`.
    pub license_arn: String,
    /// `Dimension`.
    pub dimension: String,
    /// `Timestamp`, epoch seconds.
    pub timestamp: i64,
    /// `Quantity` (absent is 0, as on the wire).
    pub quantity: i64,
}

impl EchoedRecord {
    /// The record as sent (what a faithful answer echoes).
    pub fn of(record: &MeteringRecord) -> Self {
        EchoedRecord {
            account: record.key.customer_aws_account_id.clone(),
            license_arn: record.key.license_arn.clone(),
            dimension: record.key.dimension.clone(),
            timestamp: record.key.hour.start().timestamp(),
            quantity: record.quantity,
        }
    }

    fn identity(&self) -> Identity {
        (
            self.account.clone(),
            self.license_arn.clone(),
            self.dimension.clone(),
            self.timestamp,
        )
    }
}

/// One entry of `Results`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnsweredResult {
    /// Its `UsageRecord` (`None`: the answer left it out).
    pub record: Option<EchoedRecord>,
    /// `Status` as answered (`None`: absent).
    pub status: Option<String>,
    /// `MeteringRecordId`.
    pub metering_record_id: Option<String>,
}

/// A whole answer: `Results` and `UnprocessedRecords`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// `Results`.
    pub results: Vec<AnsweredResult>,
    /// `UnprocessedRecords`.
    pub unprocessed: Vec<EchoedRecord>,
}

/// The verdict each of `sent` gets from `answer`, in the order sent.
pub fn verdicts(sent: &[MeteringRecord], answer: &Answer) -> Vec<RecordVerdict> {
    let echoes: Vec<EchoedRecord> = sent.iter().map(EchoedRecord::of).collect();
    // A batch never holds one group twice, but a queue per identity copes if it does.
    let mut by_identity: HashMap<Identity, VecDeque<usize>> = HashMap::new();
    for (index, echo) in echoes.iter().enumerate() {
        by_identity
            .entry(echo.identity())
            .or_default()
            .push_back(index);
    }
    let mut verdicts: Vec<Option<RecordVerdict>> = vec![None; sent.len()];
    let mut place = |record: Option<&EchoedRecord>, verdict: RecordVerdict| {
        let index = record
            .and_then(|r| by_identity.get_mut(&r.identity()))
            .and_then(VecDeque::pop_front);
        let (Some(index), Some(record)) = (index, record) else {
            tracing::warn!(?verdict, "a result matches no record sent");
            return;
        };
        let echoed = echoes.get(index).map(|e| e.quantity) == Some(record.quantity);
        let verdict = if echoed {
            verdict
        } else {
            tracing::warn!(?verdict, echoed = record.quantity,
                sent = ?echoes.get(index).map(|e| e.quantity),
                "a result names a record sent with another quantity");
            RecordVerdict::Ambiguous {
                why: UnclearAnswer::NotEchoed,
            }
        };
        if let Some(slot) = verdicts.get_mut(index) {
            *slot = Some(verdict);
        }
    };
    for result in &answer.results {
        let id = result.metering_record_id.clone();
        let verdict = match result.status.as_deref() {
            Some("Success") => RecordVerdict::Success {
                metering_record_id: id.unwrap_or_else(|| {
                    tracing::warn!("Success without a MeteringRecordId");
                    String::new()
                }),
            },
            Some("DuplicateRecord") => RecordVerdict::DuplicateRecord {
                metering_record_id: id,
            },
            Some("CustomerNotSubscribed") => RecordVerdict::CustomerNotSubscribed,
            other => {
                let status = other.unwrap_or_default().to_string();
                tracing::warn!(%status, "unknown BatchMeterUsage result status");
                RecordVerdict::Ambiguous {
                    why: UnclearAnswer::UnknownStatus(status),
                }
            }
        };
        place(result.record.as_ref(), verdict);
    }
    for record in &answer.unprocessed {
        place(Some(record), RecordVerdict::Unprocessed);
    }
    verdicts
        .into_iter()
        .map(|v| {
            v.unwrap_or_else(|| {
                tracing::warn!("a record sent is missing from the answer");
                RecordVerdict::Ambiguous {
                    why: UnclearAnswer::Missing,
                }
            })
        })
        .collect()
}

/// The failure a `BatchMeterUsage` call refused with exception `code` (its `__type`,
/// the model's name) and `message` stands for: throttling and a disabled Region as
/// such, the validation exceptions (the whole batch refused: bisect), an
/// authentication, authorization or signature exception refused before any record was
/// looked at ([`MeteringError::Refused`]: nothing billed), and anything else (an
/// internal error, an exception nobody expects) transient: it may have taken effect.
pub fn refusal(code: &str, message: &str) -> MeteringError {
    match code {
        "ThrottlingException" => MeteringError::Throttled(message.to_string()),
        "DisabledApiException" => MeteringError::Disabled(message.to_string()),
        c if VALIDATION_EXCEPTIONS.contains(&c) => MeteringError::Validation {
            name: code.to_string(),
            message: message.to_string(),
        },
        c if REFUSAL_EXCEPTIONS.contains(&c) => MeteringError::Refused {
            name: code.to_string(),
            message: message.to_string(),
        },
        _ => MeteringError::Transient(format!("{code}: {message}")),
    }
}

/// The failure an error answer without an exception name stands for, by its HTTP
/// `status`: 401 and 403 are refused before processing (an authorizer, a signature
/// check in front of the service); anything else (a 5xx, an unreadable 4xx) may have
/// taken effect.
pub fn unnamed_refusal(status: u16, message: &str) -> MeteringError {
    match status {
        401 | 403 => MeteringError::Refused {
            name: format!("HTTP {status}"),
            message: message.to_string(),
        },
        _ => MeteringError::Transient(format!("HTTP {status}: {message}")),
    }
}

/// How far a call that got no answer went on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// The connection failed before the request was written (refused, a name that
    /// does not resolve, a failed TLS handshake, a connect timeout).
    NotWritten,
    /// The request may have been written: a timeout, a connection broken after
    /// sending, an unreadable or missing answer.
    MayHaveBeenWritten,
}

/// The failure of a call that got no answer, given how far it went: one whose request
/// was never written is refused ([`CONNECT_FAILURE`]: nothing reached Marketplace);
/// otherwise transient (Marketplace may have processed it).
pub fn transport_failure(dispatch: Dispatch, message: &str) -> MeteringError {
    match dispatch {
        Dispatch::NotWritten => MeteringError::Refused {
            name: CONNECT_FAILURE.to_string(),
            message: message.to_string(),
        },
        Dispatch::MayHaveBeenWritten => MeteringError::Transient(message.to_string()),
    }
}

/// The faithful answer to `sent` of a Marketplace that gave `verdicts` (in order):
/// each result echoes its record; `Unprocessed` ones are listed in
/// `UnprocessedRecords`. What the simulation garbles before reading it back.
pub fn answer_of(sent: &[MeteringRecord], verdicts: &[RecordVerdict]) -> Answer {
    let mut answer = Answer::default();
    for (record, verdict) in sent.iter().zip(verdicts) {
        let echo = EchoedRecord::of(record);
        let (status, id) = match verdict {
            RecordVerdict::Success { metering_record_id } => {
                ("Success", Some(metering_record_id.clone()))
            }
            RecordVerdict::DuplicateRecord { metering_record_id } => {
                ("DuplicateRecord", metering_record_id.clone())
            }
            RecordVerdict::CustomerNotSubscribed => ("CustomerNotSubscribed", None),
            RecordVerdict::Unprocessed => {
                answer.unprocessed.push(echo);
                continue;
            }
            // Nothing answers this way; left out, which reads back as it was.
            RecordVerdict::Ambiguous { .. } => continue,
        };
        answer.results.push(AnsweredResult {
            record: Some(echo),
            status: Some(status.to_string()),
            metering_record_id: id,
        });
    }
    answer
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::GroupKey;

    fn record(dimension: &str, quantity: i64) -> MeteringRecord {
        MeteringRecord {
            key: GroupKey {
                license_arn: "arn:aws:license-manager::1:license:l-1".into(),
                customer_aws_account_id: "111122223333".into(),
                dimension: dimension.into(),
                hour: "2026-11-30T09".parse().unwrap(),
            },
            product_code: "p".into(),
            quantity,
            allocations: None,
        }
    }

    #[test]
    fn refusals_map_by_exception_name() {
        assert_eq!(
            refusal("ThrottlingException", "slow"),
            MeteringError::Throttled("slow".into())
        );
        assert_eq!(
            refusal("DisabledApiException", "off"),
            MeteringError::Disabled("off".into())
        );
        assert_eq!(
            refusal("TimestampOutOfBoundsException", "old"),
            MeteringError::Validation {
                name: "TimestampOutOfBoundsException".into(),
                message: "old".into()
            }
        );
        assert!(matches!(
            refusal("InternalServiceErrorException", "retry"),
            MeteringError::Transient(m) if m.contains("InternalServiceErrorException")
        ));
    }

    #[test]
    fn refusals_before_processing_are_definite_the_rest_may_have_taken_effect() {
        for code in [
            "AccessDeniedException",
            "UnrecognizedClientException",
            "ExpiredTokenException",
            "InvalidSignatureException",
            "InvalidClientTokenId",
            "MissingAuthenticationToken",
            "IncompleteSignature",
        ] {
            assert_eq!(
                refusal(code, "no"),
                MeteringError::Refused {
                    name: code.into(),
                    message: "no".into()
                },
                "{code}"
            );
        }
        assert!(
            matches!(unnamed_refusal(403, "forbidden"), MeteringError::Refused { name, .. } if name == "HTTP 403")
        );
        assert!(matches!(
            unnamed_refusal(401, ""),
            MeteringError::Refused { .. }
        ));
        for status in [400, 500, 502, 503, 504] {
            assert!(
                matches!(unnamed_refusal(status, ""), MeteringError::Transient(_)),
                "{status}"
            );
        }
        assert_eq!(
            transport_failure(Dispatch::NotWritten, "connection refused"),
            MeteringError::Refused {
                name: CONNECT_FAILURE.into(),
                message: "connection refused".into()
            }
        );
        assert!(matches!(
            transport_failure(Dispatch::MayHaveBeenWritten, "reset"),
            MeteringError::Transient(m) if m == "reset"
        ));
    }

    #[test]
    fn a_faithful_answer_reads_back_in_the_order_sent() {
        let sent = [record("a", 1), record("b", 2), record("c", 3)];
        let given = vec![
            RecordVerdict::Success {
                metering_record_id: "m1".into(),
            },
            RecordVerdict::Unprocessed,
            RecordVerdict::CustomerNotSubscribed,
        ];
        let mut answer = answer_of(&sent, &given);
        answer.results.reverse();
        assert_eq!(verdicts(&sent, &answer), given);
    }

    #[test]
    fn only_unprocessed_records_are_unprocessed_the_unclear_are_ambiguous() {
        let sent = [record("a", 1), record("b", 2), record("c", 3)];
        let billed = |id: &str| RecordVerdict::Success {
            metering_record_id: id.into(),
        };
        let mut answer = answer_of(&sent, &[billed("m1"), billed("m2"), billed("m3")]);
        answer.results.remove(0);
        answer.results[0].status = Some("Billed".into());
        answer.results[1].record.as_mut().unwrap().quantity = 4;
        let ambiguous = |why| RecordVerdict::Ambiguous { why };
        assert_eq!(
            verdicts(&sent, &answer),
            vec![
                ambiguous(UnclearAnswer::Missing),
                ambiguous(UnclearAnswer::UnknownStatus("Billed".into())),
                ambiguous(UnclearAnswer::NotEchoed),
            ]
        );
    }
}
