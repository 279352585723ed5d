//! Finding an upstream's token endpoint, as the MCP authorization
//! specification describes: the upstream's 401 `WWW-Authenticate`
//! challenge names its protected-resource metadata (RFC 9728; without one,
//! the well-known URL is tried), which names its authorization server,
//! whose metadata (RFC 8414, or OpenID Connect discovery) gives the token
//! endpoint. The metadata's `resource` is the RFC 8707 resource indicator.
//!
//! Each document is checked before it is believed, so that a server cannot
//! send joch's users (and their codes) elsewhere: the protected-resource
//! metadata must describe the upstream itself (its `resource` has the
//! upstream's origin and a path the upstream's is under, RFC 9728 §3.3),
//! and the authorization server's metadata must name the issuer it was
//! asked for (RFC 8414 §3.3). The issuer and whether it sends `iss` in
//! its authorization responses are kept for the callback (RFC 9207).

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
    /// The authorization server's issuer identifier, as its metadata says.
    pub issuer: String,
    /// Whether its authorization responses carry `iss` (RFC 9207).
    pub iss_supported: bool,
    /// Whether a client secret goes in the token request's body: the
    /// metadata lists `client_secret_post` and not `client_secret_basic`
    /// (RFC 8414 §2; without the list, `client_secret_basic`).
    pub secret_in_body: bool,
    /// The scopes the upstream asks for: its challenge's `scope`, else its
    /// metadata's `scopes_supported` (MCP's scope selection strategy).
    pub scopes: Vec<String>,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    #[serde(default)]
    issuer: Option<String>,
    token_endpoint: String,
    #[serde(default)]
    authorization_endpoint: Option<String>,
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Vec<String>,
}

impl ServerMetadata {
    fn secret_in_body(&self) -> bool {
        let supports = |m: &str| {
            self.token_endpoint_auth_methods_supported
                .iter()
                .any(|s| s == m)
        };
        supports("client_secret_post") && !supports("client_secret_basic")
    }
}

/// Discovers the token endpoint of `upstream` (an MCP endpoint or any
/// protected URL).
pub(crate) async fn discover(client: &Client, upstream: &str) -> Result<Discovered, String> {
    let (metadata_url, resource, challenged) = resource_metadata(client, upstream).await?;
    let scopes = scopes_asked(challenged.as_deref(), &resource.scopes_supported);
    let issuer = resource.authorization_servers.first().ok_or_else(|| {
        format!("the protected-resource metadata {metadata_url} names no authorization server")
    })?;
    for candidate in server_metadata_urls(issuer)? {
        if let Some(server) = get_json::<ServerMetadata>(client, &candidate).await? {
            let secret_in_body = server.secret_in_body();
            let said = server.issuer.unwrap_or_default();
            if !same_issuer(issuer, &said) {
                return Err(format!(
                    "the authorization server metadata at {candidate} is for issuer {said:?}, not {issuer:?}, which {metadata_url} names: joch does not use it (RFC 8414 §3.3)"
                ));
            }
            crate::outbound::check_url(&server.token_endpoint)?;
            return Ok(Discovered {
                token_url: server.token_endpoint,
                authorization_url: server.authorization_endpoint,
                resource: resource.resource,
                issuer: said,
                iss_supported: server.authorization_response_iss_parameter_supported,
                secret_in_body,
                scopes,
            });
        }
    }
    Err(format!(
        "authorization server {issuer} publishes no metadata (RFC 8414 or OpenID discovery)"
    ))
}

/// The scopes to ask for (MCP's scope selection strategy): the 401
/// challenge's `scope`, else all the protected-resource metadata's
/// `scopes_supported`, else none.
fn scopes_asked(challenged: Option<&str>, supported: &[String]) -> Vec<String> {
    match challenged {
        Some(scope) => scope.split_whitespace().map(str::to_owned).collect(),
        None => supported.to_vec(),
    }
}

/// `upstream`'s protected-resource metadata and where it was found: where
/// its 401 challenge says, else at the well-known URL with the upstream's
/// path, else at the one of its origin (RFC 9728 §3.1). Refused unless it
/// describes `upstream`. With the challenge's `scope`, if it gave one.
async fn resource_metadata(
    client: &Client,
    upstream: &str,
) -> Result<(String, ResourceMetadata, Option<String>), String> {
    let Challenge { metadata, scope } = challenge(client, upstream).await?;
    let candidates = match metadata {
        Some(url) => vec![url],
        None => {
            let mut urls = vec![well_known(upstream, "oauth-protected-resource")?];
            let root = well_known(&origin(upstream)?, "oauth-protected-resource")?;
            if !urls.contains(&root) {
                urls.push(root);
            }
            urls
        }
    };
    for url in &candidates {
        if let Some(found) = get_json::<ResourceMetadata>(client, url).await? {
            let resource = found.resource.as_deref().unwrap_or_default();
            if !resource_covers(resource, upstream) {
                return Err(format!(
                    "the protected-resource metadata at {url} is for resource {resource:?}, not {upstream}: joch does not use it (RFC 9728 §3.3)"
                ));
            }
            return Ok((url.clone(), found, scope));
        }
    }
    Err(format!(
        "{upstream} has no protected-resource metadata at {}",
        candidates.join(" or ")
    ))
}

/// `scheme://host[:port]` of `url`.
fn origin(url: &str) -> Result<String, String> {
    let parsed = Url::parse(url).map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    Ok(parsed.origin().ascii_serialization())
}

/// Whether the protected resource `resource` covers `upstream`: the same
/// origin, and `upstream`'s path at or below the resource's (whole
/// segments), as the MCP SDKs check it.
fn resource_covers(resource: &str, upstream: &str) -> bool {
    let (Ok(resource), Ok(upstream)) = (Url::parse(resource), Url::parse(upstream)) else {
        return false;
    };
    if resource.origin() != upstream.origin() {
        return false;
    }
    let base = resource.path().trim_end_matches('/');
    let path = upstream.path();
    path == base || path.starts_with(&format!("{base}/"))
}

/// Whether metadata naming issuer `said` answers for `asked` (RFC 8414
/// §3.3: identical). The one difference allowed is a `/` after an issuer
/// with no path (`https://as` and `https://as/`), the same URL (RFC 3986
/// §6.2.3), which URL libraries add: both give the same metadata URLs.
fn same_issuer(asked: &str, said: &str) -> bool {
    if asked == said {
        return true;
    }
    let bare = |s: &str| {
        let t = s.strip_suffix('/').unwrap_or(s);
        let rest = t.split_once("://").map_or("", |(_, r)| r);
        (!rest.contains('/')).then_some(t.to_owned())
    };
    matches!((bare(asked), bare(said)), (Some(a), Some(b)) if a == b)
}

/// What `upstream`'s 401 challenge says (RFC 6750 §3, RFC 9728 §5.1).
#[derive(Default)]
struct Challenge {
    /// `resource_metadata`: where its protected-resource metadata is.
    metadata: Option<String>,
    /// `scope`: the scopes a token needs.
    scope: Option<String>,
}

/// What `upstream`'s 401 challenge says, if it answers one.
async fn challenge(client: &Client, upstream: &str) -> Result<Challenge, String> {
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
        return Ok(Challenge::default());
    }
    let values: Vec<&str> = response
        .headers()
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let find = |name: &str| values.iter().find_map(|v| parameter(v, name));
    Ok(Challenge {
        metadata: find("resource_metadata"),
        scope: find("scope").filter(|s| !s.trim().is_empty()),
    })
}

/// A parameter of a `WWW-Authenticate` value (`name="value"` or `name=value`).
fn parameter(header: &str, name: &str) -> Option<String> {
    // Its own name, not the end of another's (`x_scope=`).
    let (at, _) = header
        .match_indices(&format!("{name}="))
        .find(|(i, _)| header[..*i].ends_with([' ', ',']))?;
    let rest = &header[at + name.len() + 1..];
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
        let step_up = r#"Bearer error="insufficient_scope", x_scope="no", scope="mcp:a mcp:b""#;
        assert_eq!(parameter(step_up, "scope").as_deref(), Some("mcp:a mcp:b"));
    }

    #[test]
    fn a_resource_covers_its_own_url_and_those_below_it_only() {
        let upstream = "https://mcp.example/tenant/mcp";
        for covering in [
            "https://mcp.example/tenant/mcp",
            "https://mcp.example/tenant",
            "https://mcp.example/tenant/",
            "https://mcp.example",
            "https://MCP.example:443/tenant/mcp",
        ] {
            assert!(resource_covers(covering, upstream), "{covering}");
        }
        for other in [
            "https://evil.example.com/tenant/mcp",
            "http://mcp.example/tenant/mcp",
            "https://mcp.example:8443/tenant/mcp",
            "https://mcp.example/ten",
            "https://mcp.example/tenant/mcp/more",
            "",
        ] {
            assert!(!resource_covers(other, upstream), "{other}");
        }
    }

    #[test]
    fn issuers_are_compared_exactly_but_for_a_slash_after_no_path() {
        assert!(same_issuer("https://as.example", "https://as.example"));
        assert!(same_issuer("https://as.example/", "https://as.example"));
        assert!(same_issuer("https://as.example", "https://as.example/"));
        assert!(!same_issuer(
            "https://as.example/t",
            "https://as.example/t/"
        ));
        assert!(!same_issuer(
            "https://as.example",
            "https://attacker.example.com"
        ));
        assert!(!same_issuer("https://as.example", "HTTPS://as.example"));
        assert!(!same_issuer("https://as.example", ""));
    }

    #[test]
    fn the_challenges_scope_comes_first_then_the_metadatas() {
        let supported = ["mcp:read".to_owned(), "mcp:write".to_owned()];
        assert_eq!(
            scopes_asked(Some("mcp:basic  mcp:x"), &supported),
            ["mcp:basic", "mcp:x"]
        );
        assert_eq!(scopes_asked(None, &supported), supported);
        assert!(scopes_asked(None, &[]).is_empty());
    }

    #[test]
    fn a_secret_goes_in_the_body_only_where_basic_is_not_offered() {
        let metadata = |methods: &[&str]| ServerMetadata {
            issuer: None,
            token_endpoint: "https://as.example/token".to_owned(),
            authorization_endpoint: None,
            authorization_response_iss_parameter_supported: false,
            token_endpoint_auth_methods_supported: methods
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
        };
        assert!(metadata(&["client_secret_post"]).secret_in_body());
        assert!(metadata(&["none", "client_secret_post"]).secret_in_body());
        for basic in [
            &[][..],
            &["client_secret_basic"],
            &["client_secret_post", "client_secret_basic"],
            &["none"],
        ] {
            assert!(!metadata(basic).secret_in_body(), "{basic:?}");
        }
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
