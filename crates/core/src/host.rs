//! What a resource asks of joch's host: a command to run (a stdio
//! `McpServer`) and the environment variables and files its secret
//! references read. Who may ask for what is the engine's rule
//! (`engine/src/rules/host.rs`, `may_use_host`): the host is the operator's.

use std::collections::BTreeMap;

use crate::credential::UpstreamAuth;
use crate::endpoint::{Endpoint, SecretSource};
use crate::mcp::McpServer;

/// The prefix of joch's own settings and secrets in its environment, which
/// no secret reference reads and no child process inherits.
pub const OWN_ENV_PREFIX: &str = "JOCH_";

/// One thing a resource would take from joch's host, at its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostUse<'a> {
    /// A command line joch would run (`spec.stdio`): the program and its
    /// arguments, joined by spaces.
    Command {
        /// Where: `spec.stdio.command`.
        field: String,
        /// `npx -y @modelcontextprotocol/server-everything`.
        line: String,
    },
    /// Environment variables set for that command (`spec.stdio.env`).
    CommandEnv {
        /// Where: `spec.stdio.env.NAME`.
        field: String,
    },
    /// An environment variable of joch's process read as a secret.
    Env {
        /// Where: `spec.secretHeaders.X-Key.env`.
        field: String,
        /// The variable.
        name: &'a str,
    },
    /// A file on joch's host read as a secret.
    File {
        /// Where: `spec.auth.bearer.file`.
        field: String,
        /// The path as written.
        path: &'a str,
    },
}

/// A resource that may take something from joch's host.
pub trait UsesHost {
    /// Everything it would take, each at its field.
    fn host_uses(&self) -> Vec<HostUse<'_>>;
}

impl UsesHost for Endpoint {
    fn host_uses(&self) -> Vec<HostUse<'_>> {
        let mut uses = headers("spec.secretHeaders", &self.spec.secret_headers);
        uses.extend(auth("spec.auth", self.spec.auth.as_ref()));
        uses
    }
}

impl UsesHost for McpServer {
    fn host_uses(&self) -> Vec<HostUse<'_>> {
        let mut uses = Vec::new();
        if let Some(stdio) = &self.spec.stdio {
            let line = std::iter::once(&stdio.command)
                .chain(&stdio.args)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" ");
            uses.push(HostUse::Command {
                field: "spec.stdio.command".to_owned(),
                line,
            });
            uses.extend(stdio.env.keys().map(|name| HostUse::CommandEnv {
                field: format!("spec.stdio.env.{name}"),
            }));
        }
        if let Some(http) = &self.spec.http {
            uses.extend(headers("spec.http.secretHeaders", &http.secret_headers));
            uses.extend(auth("spec.http.auth", http.auth.as_ref()));
            uses.extend(auth("spec.http.listAuth", http.list_auth.as_ref()));
        }
        uses
    }
}

fn headers<'a>(at: &str, headers: &'a BTreeMap<String, SecretSource>) -> Vec<HostUse<'a>> {
    headers
        .iter()
        .flat_map(|(name, source)| secret(format!("{at}.{name}"), source))
        .collect()
}

fn auth<'a>(at: &str, auth: Option<&'a UpstreamAuth>) -> Vec<HostUse<'a>> {
    let Some(auth) = auth else {
        return Vec::new();
    };
    let bearer = auth.bearer.iter().map(|b| (format!("{at}.bearer"), b));
    let client_secret = auth
        .oauth2
        .iter()
        .filter_map(|o| o.client_secret.as_ref())
        .map(|s| (format!("{at}.oauth2.clientSecret"), s));
    bearer
        .chain(client_secret)
        .flat_map(|(field, source)| secret(field, source))
        .collect()
}

fn secret(field: String, source: &SecretSource) -> Vec<HostUse<'_>> {
    let env = source.env.as_deref().map(|name| HostUse::Env {
        field: format!("{field}.env"),
        name,
    });
    let file = source.file.as_deref().map(|path| HostUse::File {
        field: format!("{field}.file"),
        path,
    });
    env.into_iter().chain(file).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_secret_reference_and_command_at_its_field() {
        let server: McpServer = serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"stdio": {"command": "npx", "args": ["-y", "pkg"], "env": {"K": "v"}}}
        }))
        .unwrap();
        assert_eq!(
            server.host_uses(),
            vec![
                HostUse::Command {
                    field: "spec.stdio.command".into(),
                    line: "npx -y pkg".into()
                },
                HostUse::CommandEnv {
                    field: "spec.stdio.env.K".into()
                },
            ]
        );
        let endpoint: Endpoint = serde_json::from_value(json!({
            "metadata": {"name": "e"},
            "spec": {
                "url": "http://127.0.0.1:1/",
                "secretHeaders": {"X-Key": {"env": "CRM_KEY"}},
                "auth": {"bearer": {"file": "/run/secrets/crm"}}
            }
        }))
        .unwrap();
        assert_eq!(
            endpoint.host_uses(),
            vec![
                HostUse::Env {
                    field: "spec.secretHeaders.X-Key.env".into(),
                    name: "CRM_KEY"
                },
                HostUse::File {
                    field: "spec.auth.bearer.file".into(),
                    path: "/run/secrets/crm"
                },
            ]
        );
    }
}
