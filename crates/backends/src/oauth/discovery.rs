//! Finding an upstream's token endpoint, as the MCP authorization
//! specification describes: the upstream's 401 `WWW-Authenticate`
//! challenge names its protected-resource metadata (RFC 9728; without one,
//! the well-known URL is tried), which names its authorization server,
//! whose metadata (RFC 8414, or OpenID Connect discovery) gives the token
//! endpoint. The metadata's `resource` is the RFC 8707 resource indicator.

use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{Client, StatusCode, Url};
use serde::Deserialize;

/// What discovery found for one upstream URL.
#[derive(Debug, Clone)]
pub(crate) struct Discovered {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// Its authorization endpoint, when it has one.
    pub authorization_url: Option<String>,
    /// The protected resource's identifier, for `resource`.
    pub resource: Option<String>,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    token_endpoint: String,
    #[serde(default)]
    authorization_endpoint: Option<String>,
}

/// Discovers the token endpoint of `upstream` (an MCP endpoint or any
/// protected URL).
pub(crate) async fn discover(client: &Client, upstream: &str) -> Result<Discovered, String> {
    let metadata_url = match challenge(client, upstream).await? {
        Some(url) => url,
        None => well_known(upstream, "oauth-protected-resource")?,
    };
    let resource: ResourceMetadata = get_json(client, &metadata_url).await?.ok_or_else(|| {
        format!("{upstream} has no protected-resource metadata at {metadata_url}")
    })?;
    let issuer = resource.authorization_servers.first().ok_or_else(|| {
        format!("the protected-resource metadata {metadata_url} names no authorization server")
    })?;
    for candidate in server_metadata_urls(issuer)? {
        if let Some(server) = get_json::<ServerMetadata>(client, &candidate).await? {
            crate::outbound::check_url(&server.token_endpoint)?;
            return Ok(Discovered {
                token_url: server.token_endpoint,
                authorization_url: server.authorization_endpoint,
                resource: resource.resource,
            });
        }
    }
    Err(format!(
        "authorization server {issuer} publishes no metadata (RFC 8414 or OpenID discovery)"
    ))
}

/// The `resource_metadata` of `upstream`'s 401 challenge, if it gives one.
async fn challenge(client: &Client, upstream: &str) -> Result<Option<String>, String> {
    crate::outbound::check_url(upstream)?;
    // What an MCP client's first request looks like, without a token.
    let response = client
        .post(upstream)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
        .timeout(super::TOKEN_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{upstream} cannot be reached: {e}"))?;
    if response.status() != StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response
        .headers()
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| parameter(v, "resource_metadata")))
}

/// A parameter of a `WWW-Authenticate` value (`name="value"` or `name=value`).
fn parameter(header: &str, name: &str) -> Option<String> {
    let start = header.find(&format!("{name}="))? + name.len() + 1;
    let rest = &header[start..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_owned())
}

/// `https://host/.well-known/<suffix>/path` for `https://host/path`
/// (RFC 8414 §3.1, RFC 9728 §3.1).
fn well_known(url: &str, suffix: &str) -> Result<String, String> {
    let mut parsed = Url::parse(url).map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    let path = parsed.path().trim_end_matches('/').to_owned();
    parsed.set_path(&format!("/.well-known/{suffix}{path}"));
    parsed.set_query(None);
    Ok(parsed.to_string())
}

/// Where an issuer's metadata may be, in the order the MCP specification
/// gives.
fn server_metadata_urls(issuer: &str) -> Result<Vec<String>, String> {
    let mut urls = vec![
        well_known(issuer, "oauth-authorization-server")?,
        well_known(issuer, "openid-configuration")?,
    ];
    let appended = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    if !urls.contains(&appended) {
        urls.push(appended);
    }
    Ok(urls)
}

/// The JSON at `url`, or `None` when it is not there (any non-2xx).
async fn get_json<T: serde::de::DeserializeOwned>(
    client: &Client,
    url: &str,
) -> Result<Option<T>, String> {
    crate::outbound::check_url(url)?;
    let response = client
        .get(url)
        .header(ACCEPT, "application/json")
        .timeout(super::TOKEN_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{url} cannot be reached: {e}"))?;
    if !response.status().is_success() {
        return Ok(None);
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{url} cannot be read: {e}"))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| format!("{url} is not the metadata expected: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameters_are_read_quoted_or_not() {
        let header = r#"Bearer error="invalid_token", resource_metadata="https://r/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            parameter(header, "resource_metadata").as_deref(),
            Some("https://r/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            parameter(
                "Bearer resource_metadata=https://x/m, scope=a",
                "resource_metadata"
            )
            .as_deref(),
            Some("https://x/m")
        );
        assert_eq!(parameter("Bearer realm=\"x\"", "resource_metadata"), None);
    }

    #[test]
    fn well_known_urls_insert_the_suffix_before_the_path() {
        let cases = [
            (
                "https://as.example",
                "https://as.example/.well-known/oauth-authorization-server",
            ),
            (
                "https://as.example/",
                "https://as.example/.well-known/oauth-authorization-server",
            ),
            (
                "https://as.example/tenant/1",
                "https://as.example/.well-known/oauth-authorization-server/tenant/1",
            ),
        ];
        for (issuer, expected) in cases {
            assert_eq!(
                well_known(issuer, "oauth-authorization-server").unwrap(),
                expected
            );
        }
        assert_eq!(
            server_metadata_urls("https://as.example/t").unwrap()[2],
            "https://as.example/t/.well-known/openid-configuration"
        );
    }
}
