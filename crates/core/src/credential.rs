//! Upstream credentials: how an `Endpoint` or an HTTP `McpServer`
//! authenticates to what it calls (`spec.auth`), the `Credential` record
//! in which the token vault keeps an obtained token (sealed: never in
//! clear), and the seams through which backends get a token without
//! knowing where it is kept.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::endpoint::SecretSource;
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{CallError, FieldError, ObjectMeta, Time, ValidationError};

/// `spec.auth` of an Endpoint, `spec.http.auth` of an McpServer: exactly
/// one of `bearer` and `oauth2`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamAuth {
    /// A static token read from the server's environment or a file, sent
    /// as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<SecretSource>,
    /// A token obtained from an OAuth 2.0 authorization server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2>,
}

/// `auth.oauth2`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuth2 {
    /// How the token is obtained.
    pub grant: Grant,
    /// The authorization server's token endpoint (`http://` or `https://`);
    /// absent: discovered from the upstream's 401 challenge (RFC 9728, then
    /// RFC 8414 or OpenID discovery), as MCP's authorization says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// joch's client id at that server (pre-registered); empty with
    /// `clientMetadata`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_id: String,
    /// Identify joch by the URL of the Client ID Metadata Document it
    /// serves (`{public URL}/oauth/client-metadata.json`) instead of a
    /// pre-registered `clientId`, as the MCP authorization specification
    /// allows; a public client (no secret).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_metadata: bool,
    /// joch's client secret, sent with HTTP Basic (RFC 6749 §2.3.1), or in
    /// the body where a discovered server offers only `client_secret_post`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretSource>,
    /// Scopes asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The resource indicator (RFC 8707) sent with the request; absent with
    /// discovery: the `resource` of the upstream's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Each end user's own token (`authorization_code` only, and required
    /// with it): the user consents once, and joch keeps their token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_user: bool,
    /// The authorization server's authorization endpoint, where the user
    /// consents (`authorization_code`); absent: discovered like `tokenUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
}

/// `auth.oauth2.grant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// One service token for joch itself (RFC 6749 §4.4).
    ClientCredentials,
    /// Each end user's own token, after their consent, with PKCE
    /// (RFC 6749 §4.1, RFC 7636).
    AuthorizationCode,
    /// The caller's own JWT exchanged for an upstream token on its
    /// behalf (RFC 8693).
    TokenExchange,
}

impl Grant {
    /// The name written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::ClientCredentials => "client_credentials",
            Grant::AuthorizationCode => "authorization_code",
            Grant::TokenExchange => "token_exchange",
        }
    }
}

fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

fn secret_problem(field: String, source: &SecretSource) -> Option<FieldError> {
    (source.env.is_some() == source.file.is_some()).then(|| FieldError {
        field,
        message: "give exactly one of env or file".to_owned(),
    })
}

impl UpstreamAuth {
    /// Every mistake in it, each at its exact path under `at` (e.g.
    /// `spec.auth`).
    pub fn problems(&self, at: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut problem = |field: String, message: &str| {
            errors.push(FieldError {
                field,
                message: message.to_owned(),
            })
        };
        match (&self.bearer, &self.oauth2) {
            (Some(bearer), None) => {
                errors.extend(secret_problem(format!("{at}.bearer"), bearer));
            }
            (None, Some(oauth2)) => errors.extend(oauth2.problems(&format!("{at}.oauth2"))),
            _ => problem(at.to_owned(), "give exactly one of bearer or oauth2"),
        }
        errors
    }
}

impl OAuth2 {
    /// True when each end user gets their own token (consent, or token
    /// exchange), kept per user.
    pub fn takes_user(&self) -> bool {
        self.per_user || self.grant == Grant::TokenExchange
    }

    fn problems(&self, at: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut problem = |field: &str, message: String| {
            errors.push(FieldError {
                field: format!("{at}.{field}"),
                message,
            })
        };
        match (self.grant, self.per_user) {
            (Grant::ClientCredentials, false)
            | (Grant::AuthorizationCode, true)
            | (Grant::TokenExchange, false) => {}
            (Grant::ClientCredentials, true) => problem(
                "perUser",
                "client_credentials gets one service token; per-user tokens take grant authorization_code".to_owned(),
            ),
            (Grant::AuthorizationCode, false) => problem(
                "perUser",
                "authorization_code gets each end user's own token: set perUser: true".to_owned(),
            ),
            (Grant::TokenExchange, true) => problem(
                "perUser",
                "token_exchange acts for each caller already: leave perUser out".to_owned(),
            ),
        }
        for (field, url) in [
            ("tokenUrl", &self.token_url),
            ("authorizationUrl", &self.authorization_url),
        ] {
            if let Some(url) = url.as_deref().filter(|u| !is_http_url(u)) {
                problem(
                    field,
                    format!("must be an http:// or https:// URL, got {url:?}"),
                );
            }
        }
        match (self.client_id.trim().is_empty(), self.client_metadata) {
            (true, false) => problem(
                "clientId",
                "must not be empty (or set clientMetadata: true)".to_owned(),
            ),
            (false, true) => problem(
                "clientMetadata",
                "joch's metadata document URL is the client id: leave clientId out".to_owned(),
            ),
            _ => {}
        }
        if self.client_metadata && self.client_secret.is_some() {
            problem(
                "clientSecret",
                "a client identified by its metadata document is public: leave clientSecret out"
                    .to_owned(),
            );
        }
        if let Some(resource) = self.resource.as_deref().filter(|r| !is_http_url(r)) {
            problem(
                "resource",
                format!("must be an http:// or https:// URL, got {resource:?}"),
            );
        }
        for (i, scope) in self.scopes.iter().enumerate() {
            if scope.is_empty() || scope.contains(char::is_whitespace) {
                problem(
                    &format!("scopes[{i}]"),
                    "must be one non-empty word".to_owned(),
                );
            }
        }
        if let Some(secret) = &self.client_secret {
            errors.extend(secret_problem(format!("{at}.clientSecret"), secret));
        }
        errors
    }
}

/// The resource whose `auth` a token is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamRef {
    /// `Endpoint` or `McpServer`.
    pub kind: String,
    /// Its name in the namespace.
    pub name: String,
}

impl UpstreamRef {
    /// An Endpoint of the namespace.
    pub fn endpoint(name: &str) -> Self {
        Self {
            kind: crate::Endpoint::KIND.to_owned(),
            name: name.to_owned(),
        }
    }

    /// An McpServer of the namespace.
    pub fn mcp_server(name: &str) -> Self {
        Self {
            kind: crate::McpServer::KIND.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// What a token endpoint issued (RFC 6749 §5.1). Debug never shows the
/// tokens.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedToken {
    /// The access token.
    pub access_token: String,
    /// A refresh token, when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds it is valid for, when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
    /// The scopes granted, when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// What a token request sends beside the client: the grant's own fields.
/// Debug never shows the code, verifier or refresh token.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenGrant {
    /// `client_credentials`: nothing more.
    ClientCredentials,
    /// `authorization_code` with its PKCE verifier (RFC 7636) and the
    /// redirect URI the code was issued to.
    Code {
        /// The code the authorization server gave the user's browser.
        code: String,
        /// The PKCE code verifier kept since the consent began.
        verifier: String,
        /// joch's callback URL, as sent in the authorization request.
        redirect_uri: String,
    },
    /// `refresh_token` (RFC 6749 §6).
    Refresh {
        /// The refresh token kept in the vault.
        refresh_token: String,
    },
    /// Token exchange (RFC 8693): the caller's JWT as the subject token.
    Exchange {
        /// The JWT the caller presented to joch.
        subject_token: String,
    },
}

impl std::fmt::Debug for TokenGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenGrant::ClientCredentials => "ClientCredentials",
            TokenGrant::Code { .. } => "Code",
            TokenGrant::Refresh { .. } => "Refresh",
            TokenGrant::Exchange { .. } => "Exchange",
        })
    }
}

/// Where an authorization request goes: the endpoint and the resource
/// indicator (RFC 8707) to send with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationTarget {
    /// The authorization endpoint.
    pub url: String,
    /// The resource indicator, as configured or discovered.
    pub resource: Option<String>,
    /// The authorization server's issuer, when discovered: the `iss` of
    /// its authorization response must be it, exactly (RFC 9207).
    pub issuer: Option<String>,
    /// Its metadata says its authorization responses carry `iss`: one
    /// without is refused.
    pub iss_required: bool,
    /// The scopes to ask for when none are configured, as discovered: the
    /// upstream's 401 challenge's `scope`, else its protected-resource
    /// metadata's `scopes_supported` (MCP's scope selection strategy).
    pub scopes: Vec<String>,
}

/// Asks an authorization server's token endpoint for a token. Implemented
/// over HTTP by the backends; errors never contain a token or a secret.
#[async_trait]
pub trait TokenEndpoint: Send + Sync {
    /// A token for `oauth2`'s client (its scopes, resource) for the
    /// upstream at `upstream_url` (where discovery starts), by `grant`.
    async fn request(
        &self,
        oauth2: &OAuth2,
        upstream_url: &str,
        grant: &TokenGrant,
    ) -> Result<IssuedToken, String>;

    /// The authorization endpoint for `oauth2` (as written, or discovered
    /// from the upstream at `upstream_url`).
    async fn authorization_target(
        &self,
        oauth2: &OAuth2,
        upstream_url: &str,
    ) -> Result<AuthorizationTarget, String>;
}

/// Gives backends the `Authorization` header value for an upstream: from
/// the token vault, fetched or refreshed as needed. Errors never contain a
/// token.
#[async_trait]
pub trait UpstreamCredentials: Send + Sync {
    /// `Bearer <token>` for `upstream` (at `url`) of `namespace` under
    /// `oauth2`, for `user` when `oauth2.per_user` (the call's
    /// `status.upstreamUser`). A per-user token joch does not hold fails
    /// with `consent_required`.
    async fn authorization(
        &self,
        namespace: &str,
        upstream: &UpstreamRef,
        url: &str,
        oauth2: &OAuth2,
        user: Option<&str>,
    ) -> Result<String, CallError>;

    /// The upstream refused `authorization` (a 401 mid-session): the
    /// token is stale, so the next `authorization` obtains a new one
    /// (refreshed, once across replicas; or, for a user whose refresh
    /// token is refused too, `consent_required`). A token already
    /// replaced is left alone.
    async fn refused(
        &self,
        namespace: &str,
        upstream: &UpstreamRef,
        oauth2: &OAuth2,
        user: Option<&str>,
        authorization: &str,
    ) {
        let _ = (namespace, upstream, oauth2, user, authorization);
    }
}

/// A token held by the vault, for one namespace, user and upstream. The
/// token itself is only in `spec.sealed`, encrypted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credential {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Credential`.
    #[serde(default = "credential_kind")]
    pub kind: String,
    /// Name (derived from upstream and user), namespace.
    pub metadata: ObjectMeta,
    /// Whose, for what, and the sealed token.
    pub spec: CredentialSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn credential_kind() -> String {
    Credential::KIND.to_owned()
}

/// `Credential.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialSpec {
    /// The Endpoint or McpServer it authenticates to.
    pub upstream: UpstreamRef,
    /// The end user it acts for; absent: joch's own service token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// How it was obtained.
    pub grant: Grant,
    /// The scopes granted, as the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// When it was obtained.
    pub obtained_at: Time,
    /// When the access token expires, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// The id of the vault key it is sealed under.
    pub key_id: String,
    /// base64 of nonce ‖ AES-256-GCM ciphertext of the token (empty while
    /// the first token is being obtained).
    pub sealed: String,
    /// A replica is obtaining a new token until then; others wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshing_until: Option<Time>,
}

impl Credential {
    /// The record name for `upstream` and `user` (`service` for none).
    pub fn name_for(upstream: &UpstreamRef, user: Option<&str>) -> String {
        let who = user.map_or("service".to_owned(), |u| {
            format!("user-{}", &crate::token::hash(u)[..16])
        });
        format!("{}.{}.{who}", upstream.kind.to_lowercase(), upstream.name)
    }
}

impl Object for Credential {
    const KIND: &'static str = "Credential";
    const PLURAL: &'static str = "credentials";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Credential>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)
    }
}

mod consent;
pub use consent::{ConsentRequest, ConsentRequestSpec};

#[cfg(test)]
mod tests;
