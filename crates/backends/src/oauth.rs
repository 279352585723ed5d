//! OAuth 2.0 token requests over HTTP (RFC 6749 §4.4, §5), and the
//! `Authorization` header an upstream's `spec.auth` asks for.
//!
//! The request is a few lines of form encoding and JSON; the `oauth2`
//! crate would add its own HTTP client abstraction and type-state builders
//! for the one grant joch sends here. Errors name the server's `error` and
//! `error_description`, never a token or a secret.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use joch_core::credential::{
    AuthorizationTarget, IssuedToken, OAuth2, TokenEndpoint, TokenGrant, UpstreamAuth,
    UpstreamCredentials, UpstreamRef,
};
use joch_core::{CallError, ErrorCode};
use reqwest::Client;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;

mod discovery;

/// RFC 8693's grant type and token type URIs.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// How long a token request (or a discovery request) may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);

/// Token requests with joch's outbound HTTP client.
#[derive(Debug, Clone)]
pub struct HttpTokenEndpoint {
    client: Client,
    /// Discovery's findings by upstream URL, kept while joch runs.
    discovered: Arc<Mutex<HashMap<String, discovery::Discovered>>>,
}

impl HttpTokenEndpoint {
    /// A client with its own connection pool; redirects are not followed.
    pub fn new() -> Result<Self, reqwest::Error> {
        crate::install_crypto_provider();
        let client = crate::outbound::client_builder().build()?;
        Ok(Self {
            client,
            discovered: Arc::default(),
        })
    }
}

/// An error answer of a token endpoint (RFC 6749 §5.2).
#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// The token request's body; `secret_in_body`: the client secret, where
/// the server takes it there (`client_secret_post`, RFC 6749 §2.3.1)
/// rather than with HTTP Basic.
fn form(
    oauth2: &OAuth2,
    resource: Option<&str>,
    grant: &TokenGrant,
    secret_in_body: Option<&str>,
) -> Result<String, String> {
    let mut fields = match grant {
        TokenGrant::ClientCredentials => vec![("grant_type", "client_credentials".to_owned())],
        TokenGrant::Code {
            code,
            verifier,
            redirect_uri,
        } => vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.clone()),
            ("code_verifier", verifier.clone()),
            ("redirect_uri", redirect_uri.clone()),
        ],
        TokenGrant::Refresh { refresh_token } => vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh_token.clone()),
        ],
        TokenGrant::Exchange { subject_token } => vec![
            ("grant_type", TOKEN_EXCHANGE.to_owned()),
            ("subject_token", subject_token.clone()),
            ("subject_token_type", JWT_TYPE.to_owned()),
            ("requested_token_type", ACCESS_TOKEN_TYPE.to_owned()),
        ],
    };
    // A code grant's scopes were asked for at consent (RFC 6749 §4.1.3).
    if !oauth2.scopes.is_empty() && !matches!(grant, TokenGrant::Code { .. }) {
        fields.push(("scope", oauth2.scopes.join(" ")));
    }
    if let Some(resource) = resource {
        fields.push(("resource", resource.to_owned()));
    }
    if oauth2.client_secret.is_none() || secret_in_body.is_some() {
        // A public client identifies itself in the body (RFC 6749 §2.3.1).
        fields.push(("client_id", oauth2.client_id.clone()));
    }
    if let Some(secret) = secret_in_body {
        fields.push(("client_secret", secret.to_owned()));
    }
    serde_urlencoded::to_string(fields).map_err(|e| e.to_string())
}

/// `Basic base64(urlencode(id):urlencode(secret))`, RFC 6749 §2.3.1.
fn basic(client_id: &str, secret: &str) -> String {
    let encode =
        |s: &str| serde_urlencoded::to_string([("", s)]).unwrap_or_default()[1..].to_owned();
    let pair = format!("{}:{}", encode(client_id), encode(secret));
    format!("Basic {}", STANDARD.encode(pair))
}

impl HttpTokenEndpoint {
    /// The token endpoint and resource indicator for `oauth2`, and whether
    /// its client secret goes in the body: as written (with HTTP Basic), or
    /// discovered from the upstream (once per upstream URL).
    async fn token_url(
        &self,
        oauth2: &OAuth2,
        upstream_url: &str,
    ) -> Result<(String, Option<String>, bool), String> {
        if let Some(url) = &oauth2.token_url {
            return Ok((url.clone(), oauth2.resource.clone(), false));
        }
        let found = self.discovered(upstream_url).await?;
        let resource = oauth2.resource.clone().or(found.resource);
        Ok((found.token_url, resource, found.secret_in_body))
    }

    /// What discovery found for `upstream_url`, asked once while joch runs.
    async fn discovered(&self, upstream_url: &str) -> Result<discovery::Discovered, String> {
        let known = self
            .discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(upstream_url)
            .cloned();
        let found = match known {
            Some(found) => found,
            None => {
                let found = discovery::discover(&self.client, upstream_url).await?;
                self.discovered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(upstream_url.to_owned(), found.clone());
                found
            }
        };
        Ok(found)
    }
}

#[async_trait]
impl TokenEndpoint for HttpTokenEndpoint {
    async fn authorization_target(
        &self,
        oauth2: &OAuth2,
        upstream_url: &str,
    ) -> Result<AuthorizationTarget, String> {
        if let Some(url) = &oauth2.authorization_url {
            return Ok(AuthorizationTarget {
                url: url.clone(),
                resource: oauth2.resource.clone(),
                issuer: None,
                iss_required: false,
                scopes: Vec::new(),
            });
        }
        let found = self.discovered(upstream_url).await?;
        let url = found.authorization_url.ok_or_else(|| {
            format!(
                "the authorization server of {upstream_url} publishes no authorization_endpoint"
            )
        })?;
        Ok(AuthorizationTarget {
            url,
            resource: oauth2.resource.clone().or(found.resource),
            issuer: Some(found.issuer),
            iss_required: found.iss_supported,
            scopes: found.scopes,
        })
    }

    async fn request(
        &self,
        oauth2: &OAuth2,
        upstream_url: &str,
        grant: &TokenGrant,
    ) -> Result<IssuedToken, String> {
        let (url, resource, secret_in_body) = self.token_url(oauth2, upstream_url).await?;
        crate::outbound::check_url(&url)?;
        let secret = oauth2
            .client_secret
            .as_ref()
            .map(crate::secret)
            .transpose()?;
        let in_body = secret.as_deref().filter(|_| secret_in_body);
        let mut request = self
            .client
            .post(&url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .timeout(TOKEN_TIMEOUT)
            .body(form(oauth2, resource.as_deref(), grant, in_body)?);
        if let (Some(secret), None) = (&secret, in_body) {
            request = request.header(AUTHORIZATION, basic(&oauth2.client_id, secret));
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("token endpoint {url} cannot be reached: {e}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("token endpoint {url} answer cannot be read: {e}"))?;
        if !status.is_success() {
            let said = serde_json::from_slice::<ErrorAnswer>(&body)
                .map(|e| match e.error_description {
                    Some(d) => format!(": {} ({d})", e.error),
                    None => format!(": {}", e.error),
                })
                .unwrap_or_default();
            return Err(format!(
                "token endpoint {url} answered HTTP {}{said}",
                status.as_u16()
            ));
        }
        let token: IssuedToken = serde_json::from_slice(&body)
            .map_err(|_| format!("token endpoint {url} answered no access_token"))?;
        if token.access_token.is_empty() {
            return Err(format!(
                "token endpoint {url} answered an empty access_token"
            ));
        }
        Ok(token)
    }
}

/// The `Authorization` value for `upstream` under `auth`: a bearer secret
/// read now, or an OAuth token from `credentials` (the vault).
pub(crate) async fn authorization(
    auth: &UpstreamAuth,
    namespace: &str,
    upstream: &UpstreamRef,
    url: &str,
    credentials: Option<&dyn UpstreamCredentials>,
    user: Option<&str>,
) -> Result<String, CallError> {
    let failed = |message: String| CallError::new(ErrorCode::UpstreamAuthFailed, message);
    match (&auth.bearer, &auth.oauth2, credentials) {
        (Some(source), _, _) => crate::secret(source)
            .map(|token| format!("Bearer {token}"))
            .map_err(failed),
        (None, Some(oauth2), Some(credentials)) => {
            credentials
                .authorization(namespace, upstream, url, oauth2, user)
                .await
        }
        (None, Some(_), None) => Err(failed(
            "this joch has no token vault: oauth2 upstreams need one".to_owned(),
        )),
        (None, None, _) => Err(failed("spec.auth names no method".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_credentials_are_basic_and_url_encoded() {
        assert_eq!(
            basic("a b", "p:w"),
            format!("Basic {}", STANDARD.encode("a+b:p%3Aw"))
        );
    }

    #[test]
    fn a_secret_in_the_body_comes_with_the_client_id() {
        let oauth2: OAuth2 = serde_json::from_value(serde_json::json!({
            "grant": "client_credentials",
            "clientId": "joch",
            "clientSecret": {"env": "UNUSED"},
        }))
        .unwrap();
        let grant = TokenGrant::ClientCredentials;
        assert_eq!(
            form(&oauth2, None, &grant, None).unwrap(),
            "grant_type=client_credentials"
        );
        assert_eq!(
            form(&oauth2, None, &grant, Some("p&w")).unwrap(),
            "grant_type=client_credentials&client_id=joch&client_secret=p%26w"
        );
    }
}
