//! The edge every request crosses first: what a web page in the
//! operator's browser, or a DNS name rebound onto joch's address, could
//! make a browser send is refused before anything reads it, in every mode,
//! authenticated or not, on every route.
//!
//! 1. `Host` must name this joch: a loopback name, the public URL's host,
//!    a host the operator allows (`--allowed-host`), or an IP address (a
//!    browser sends an address only to that address, so it cannot be
//!    rebound). Anything else is 421 `misdirected_request`.
//! 2. A request that may change something (any method but GET, HEAD and
//!    OPTIONS) must come from joch's own origin: its `Origin` is the host it
//!    was sent to, the public URL, or an `--allowed-origin`; without
//!    `Origin`, `Sec-Fetch-Site` must not say `cross-site` or `same-site`.
//!    Else 403 `cross_site_request`.
//! 3. Its body, if it has one, must be JSON or YAML, which a browser sends
//!    to another origin only after a CORS preflight that joch never
//!    answers: other types, and a body without a type, are 415
//!    `unsupported_media_type`. The console's forms are the exception; they
//!    carry its CSRF token (`console/viewer.rs`).
//!
//! Console pages also refuse to be framed (`frame-ancestors 'none'`).

use std::sync::Arc;

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ApiError;
use crate::ApiWord;

/// The host names a loopback joch answers to by default.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Who may reach joch from a browser: the hosts it serves and the origins
/// whose pages may write to it.
#[derive(Debug, Clone)]
pub struct Edge {
    /// Host names (lowercase, without port); `*` accepts any.
    hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lowercase) besides joch's own.
    origins: Vec<String>,
}

impl Edge {
    /// Serves `hosts` (with the loopback names and IP addresses always)
    /// and takes writes from pages of `origins` besides joch's own.
    pub fn new(hosts: &[String], origins: &[String]) -> Edge {
        let hosts = LOOPBACK_HOSTS
            .iter()
            .map(|h| h.to_string())
            .chain(hosts.iter().map(|h| host_name(h)))
            .collect();
        let origins = origins.iter().map(|o| origin_of(o)).collect();
        Edge { hosts, origins }
    }

    /// The refusal for `request`, if it gets one.
    fn check(&self, request: &Request) -> Result<(), ApiError> {
        let headers = request.headers();
        let host = request
            .uri()
            .authority()
            .map(Authority::as_str)
            .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
        if let Some(host) = host {
            self.serves(host)?;
        }
        if matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        ) {
            return Ok(());
        }
        self.same_origin(headers, host)?;
        if request.body().size_hint().upper() != Some(0) {
            body_type(headers, request.uri().path())?;
        }
        Ok(())
    }

    fn serves(&self, host: &str) -> Result<(), ApiError> {
        let name = Authority::try_from(host)
            .map(|a| host_name(a.host()))
            .unwrap_or_default();
        let served = name.parse::<std::net::IpAddr>().is_ok()
            || self.hosts.iter().any(|h| h == "*" || *h == name);
        match served {
            true => Ok(()),
            false => Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                ApiWord::MisdirectedRequest,
                format!(
                    "this joch does not serve the host {name:?}; its operator lists the names \
                     it answers to with --allowed-host (or --public-url)"
                ),
            )
            .with_details(json!({"host": name}))),
        }
    }

    fn same_origin(&self, headers: &HeaderMap, host: Option<&str>) -> Result<(), ApiError> {
        let refused = |from: &str| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                ApiWord::CrossSiteRequest,
                format!(
                    "a request from {from} may not change anything here; joch's operator \
                     allows other origins with --allowed-origin"
                ),
            )
            .with_details(json!({"origin": from}))
        };
        match headers.get(header::ORIGIN).map(HeaderValue::to_str) {
            Some(Ok(origin)) => {
                let origin = origin_of(origin);
                let own = host.is_some_and(|h| {
                    origin
                        .split_once("://")
                        .is_some_and(|(_, at)| at.eq_ignore_ascii_case(h))
                });
                match own || self.origins.contains(&origin) {
                    true => Ok(()),
                    false => Err(refused(&origin)),
                }
            }
            Some(Err(_)) => Err(refused("an unreadable origin")),
            None => match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
                Some(b"cross-site" | b"same-site") => Err(refused("another site")),
                _ => Ok(()),
            },
        }
    }
}

/// A body a browser cannot send cross-site without a preflight: JSON or
/// YAML (and on the console, its CSRF-checked forms).
fn body_type(headers: &HeaderMap, path: &str) -> Result<(), ApiError> {
    let sent = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = joch_core::artifact::media_essence(sent);
    let accepted = essence == "application/json"
        || essence.ends_with("+json")
        || is_yaml(&essence)
        || (path.starts_with("/ui/")
            && matches!(
                essence.as_str(),
                "application/x-www-form-urlencoded" | "multipart/form-data"
            ));
    match accepted {
        true => Ok(()),
        false => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiWord::UnsupportedMediaType,
            format!(
                "a request body must be JSON (Content-Type: application/json) or YAML \
                 (application/yaml), not {:?}",
                if sent.is_empty() {
                    "no Content-Type"
                } else {
                    sent
                }
            ),
        )
        .with_details(
            json!({"contentType": sent, "accepted": ["application/json", "application/yaml"]}),
        )),
    }
}

/// The YAML media types joch reads bodies as.
pub(crate) fn is_yaml(essence: &str) -> bool {
    matches!(
        essence,
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
    ) || essence.ends_with("+yaml")
}

/// `Host`'s name part as compared: lowercase, no brackets or trailing dot.
fn host_name(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// An origin as compared: lowercase, no trailing slash.
fn origin_of(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// The middleware: refuses what [`Edge`] refuses, and keeps console pages
/// out of frames.
pub(crate) async fn guard(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    if let Err(refusal) = edge.check(&request) {
        return refusal.into_response();
    }
    let console = request.uri().path().starts_with("/ui");
    let mut response = next.run(request).await;
    if console {
        unframed(response.headers_mut());
    }
    response
}

/// Adds `frame-ancestors 'none'` to the page's policy (one header, so that
/// a page's own policy, an artifact's `sandbox`, reads as one).
fn unframed(headers: &mut HeaderMap) {
    const NONE: &str = "frame-ancestors 'none'";
    let policy = match headers.get(header::CONTENT_SECURITY_POLICY) {
        Some(own) => format!("{}; {NONE}", own.to_str().unwrap_or_default()),
        None => NONE.to_owned(),
    };
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    fn edge() -> Edge {
        Edge::new(
            &["joch.example".to_owned()],
            &["https://ops.example".to_owned()],
        )
    }

    fn request(method: Method, headers: &[(&str, &str)], body: &'static str) -> Request {
        let mut builder = Request::builder()
            .method(method)
            .uri("/v1/namespaces/default/tools");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(body)).unwrap()
    }

    fn code(result: Result<(), ApiError>) -> String {
        result
            .err()
            .map(|e| e.code.as_str().to_owned())
            .unwrap_or_default()
    }

    #[test]
    fn hosts_joch_serves() {
        let edge = edge();
        for host in [
            "127.0.0.1:7070",
            "localhost",
            "[::1]:80",
            "JOCH.example.:443",
            "10.1.2.3:7070",
        ] {
            assert_eq!(
                code(edge.check(&request(Method::GET, &[("host", host)], ""))),
                "",
                "{host}"
            );
        }
        for host in [
            "attacker.example",
            "localhost.attacker.example:7070",
            "127.0.0.1.nip.io",
        ] {
            assert_eq!(
                code(edge.check(&request(Method::GET, &[("host", host)], ""))),
                "misdirected_request",
                "{host}"
            );
        }
    }

    #[test]
    fn writes_from_other_origins() {
        let edge = edge();
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:7070");
        let cases = [
            (vec![host, json], ""),
            (vec![host, json, ("origin", "http://127.0.0.1:7070")], ""),
            (vec![host, json, ("origin", "https://ops.example")], ""),
            (vec![host, json, ("sec-fetch-site", "same-origin")], ""),
            (
                vec![host, json, ("origin", "http://attacker.example")],
                "cross_site_request",
            ),
            (vec![host, json, ("origin", "null")], "cross_site_request"),
            (
                vec![host, json, ("origin", "http://localhost:8080")],
                "cross_site_request",
            ),
            (
                vec![host, json, ("sec-fetch-site", "cross-site")],
                "cross_site_request",
            ),
            (
                vec![host, json, ("sec-fetch-site", "same-site")],
                "cross_site_request",
            ),
        ];
        for (headers, expected) in cases {
            let got = code(edge.check(&request(Method::POST, &headers, "{}")));
            assert_eq!(got, expected, "{headers:?}");
        }
    }

    #[test]
    fn bodies_a_browser_sends_without_preflight() {
        let edge = edge();
        let host = ("host", "localhost:7070");
        for (kind, expected) in [
            ("application/json", ""),
            ("application/json; charset=utf-8", ""),
            ("application/merge-patch+json", ""),
            ("application/yaml", ""),
            ("text/plain", "unsupported_media_type"),
            (
                "application/x-www-form-urlencoded",
                "unsupported_media_type",
            ),
            ("multipart/form-data; boundary=x", "unsupported_media_type"),
        ] {
            let got = code(edge.check(&request(
                Method::POST,
                &[host, ("content-type", kind)],
                "{}",
            )));
            assert_eq!(got, expected, "{kind}");
        }
        let untyped = request(Method::POST, &[host], "{}");
        assert_eq!(code(edge.check(&untyped)), "unsupported_media_type");
        let empty = request(Method::POST, &[host], "");
        assert_eq!(code(edge.check(&empty)), "");
        let mut form = request(
            Method::POST,
            &[host, ("content-type", "application/x-www-form-urlencoded")],
            "csrf=x",
        );
        *form.uri_mut() = "/ui/signin".parse().unwrap();
        assert_eq!(code(edge.check(&form)), "");
    }
}
