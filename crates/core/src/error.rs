//! Validation errors: what is wrong with a resource, field by field.

use serde::Serialize;

/// One problem with one field of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `metadata.name` or `spec.inputSchema`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// A resource that cannot be accepted, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", summary(.0))]
pub struct ValidationError(pub Vec<FieldError>);

impl ValidationError {
    /// A single-field error.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self(vec![FieldError {
            field: field.into(),
            message: message.into(),
        }])
    }
}

fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect::<Vec<_>>()
        .join("; ")
}
