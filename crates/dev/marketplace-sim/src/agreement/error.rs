//! The Agreement API's exceptions (`ValidationException` with its reason and fields,
//! `ResourceNotFoundException` with the resource, ...) and their HTTP status.

use axum::http::StatusCode;
use serde::Serialize;

/// The exceptions the Agreement API answers, as the model names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AgreementErrorKind {
    /// A request breaks a constraint; carries a `reason` and `fields`.
    Validation,
    /// The agreement, invoice or billing adjustment named does not exist.
    ResourceNotFound,
    /// The caller may not act on this agreement (e.g. not the seller of record).
    AccessDenied,
    /// The per-operation rate quota refused the call.
    Throttling,
    /// The request conflicts with the resource's state.
    Conflict,
    /// A server-side failure (HTTP 500).
    InternalServer,
    /// The path or `X-Amz-Target` names an operation the simulator does not serve.
    UnknownOperation,
    /// The body is not a map of the expected member types.
    Serialization,
}

impl AgreementErrorKind {
    /// The `__type` value on the wire.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Validation => "ValidationException",
            Self::ResourceNotFound => "ResourceNotFoundException",
            Self::AccessDenied => "AccessDeniedException",
            Self::Throttling => "ThrottlingException",
            Self::Conflict => "ConflictException",
            Self::InternalServer => "InternalServerException",
            Self::UnknownOperation => "UnknownOperationException",
            Self::Serialization => "SerializationException",
        }
    }

    /// 500 for the internal failure, 400 for every client error (as the API
    /// reference documents).
    pub fn http_status(self) -> StatusCode {
        match self {
            Self::InternalServer => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// One offending member of a `ValidationException`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The member's wire name.
    pub name: String,
    /// What is wrong with it.
    pub message: String,
}

/// An Agreement API exception with the members its shape carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.wire_name())]
pub struct AgreementError {
    /// Which exception.
    pub kind: AgreementErrorKind,
    /// The human-readable reason.
    pub message: String,
    /// `reason` (ValidationException, AccessDeniedException).
    pub reason: Option<&'static str>,
    /// `fields` (ValidationException).
    pub fields: Vec<FieldProblem>,
    /// `resourceId` and `resourceType` (ResourceNotFoundException, ConflictException).
    pub resource: Option<(String, &'static str)>,
}

impl AgreementError {
    fn new(kind: AgreementErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            reason: None,
            fields: Vec::new(),
            resource: None,
        }
    }

    /// A `ValidationException` with `reason`, naming `field`.
    pub fn validation(reason: &'static str, field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            reason: Some(reason),
            fields: vec![FieldProblem {
                name: field.to_owned(),
                message: message.clone(),
            }],
            ..Self::new(AgreementErrorKind::Validation, message)
        }
    }

    /// A `ResourceNotFoundException` for `resource_type` `id`.
    pub fn not_found(resource_type: &'static str, id: &str) -> Self {
        Self {
            resource: Some((id.to_owned(), resource_type)),
            ..Self::new(
                AgreementErrorKind::ResourceNotFound,
                format!("{resource_type} {id} was not found"),
            )
        }
    }

    /// An `AccessDeniedException` with `reason`.
    pub fn access_denied(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            ..Self::new(AgreementErrorKind::AccessDenied, message)
        }
    }

    /// A `ThrottlingException`.
    pub fn throttling(message: impl Into<String>) -> Self {
        Self::new(AgreementErrorKind::Throttling, message)
    }

    /// A `SerializationException` (a member of the wrong type, a body that does not parse).
    pub fn serialization(message: impl Into<String>) -> Self {
        Self::new(AgreementErrorKind::Serialization, message)
    }

    /// An `UnknownOperationException`.
    pub fn unknown_operation(message: impl Into<String>) -> Self {
        Self::new(AgreementErrorKind::UnknownOperation, message)
    }

    /// An `InternalServerException`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(AgreementErrorKind::InternalServer, message)
    }
}
