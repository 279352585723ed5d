//! The `Endpoint` resource: an HTTP endpoint that declarative tools call by
//! name, with secret headers resolved at call time and never recorded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::tool::{RestEndpoint, default_timeout_ms, post};
use crate::{FieldError, ObjectMeta, ValidationError};

/// A named HTTP endpoint of a namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Endpoint {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Endpoint`.
    #[serde(default = "endpoint_kind")]
    pub kind: String,
    /// Name (what actions say in `endpoint`), namespace.
    pub metadata: ObjectMeta,
    /// Where and how.
    pub spec: EndpointSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn endpoint_kind() -> String {
    Endpoint::KIND.to_owned()
}

/// `Endpoint.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointSpec {
    /// `http://` or `https://` URL.
    pub url: String,
    /// HTTP method, default `POST`.
    #[serde(default = "post")]
    pub method: String,
    /// Plain headers, recorded as written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Give up after this long (default 30 000 ms).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Headers whose values come from the server's environment or a file at
    /// call time; only the reference is stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: BTreeMap<String, SecretSource>,
    /// How joch authenticates to it: a bearer secret or an OAuth 2.0 token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::credential::UpstreamAuth>,
}

/// Where a secret header's value is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSource {
    /// An environment variable of the joch server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file on the joch server (its content, trimmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl EndpointSpec {
    /// The endpoint without its secrets, in the shape the webhook backend takes.
    pub fn as_rest(&self) -> RestEndpoint {
        RestEndpoint {
            method: self.method.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            timeout_ms: self.timeout_ms,
        }
    }
}

impl Object for Endpoint {
    const KIND: &'static str = "Endpoint";
    const PLURAL: &'static str = "endpoints";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Endpoint>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        let mut errors = self.spec.as_rest().problems("spec");
        for (header, source) in &self.spec.secret_headers {
            if source.env.is_some() == source.file.is_some() {
                errors.push(FieldError {
                    field: format!("spec.secretHeaders.{header}"),
                    message: "give exactly one of env or file".to_owned(),
                });
            }
        }
        if let Some(auth) = &self.spec.auth {
            errors.extend(auth.problems("spec.auth"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}
