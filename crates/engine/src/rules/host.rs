//! The host is the operator's: what runs on joch's machine and what joch
//! reads there is decided by whoever starts `joch serve`, through the
//! allow-lists of [`HostAccess`]. A namespace's admin may name a stdio
//! command, an environment variable or a file only within them; the
//! operator (the local caller, the root token) is bound by them only as to
//! joch's own secrets, which no one reaches by a reference: its `JOCH_*`
//! variables and its own key files.

use std::path::{Component, Path, PathBuf};

use globset::Glob;
use joch_core::host::{HostUse, OWN_ENV_PREFIX};
use joch_core::{FieldError, Principal, ValidationError};

use crate::EngineError;
use crate::rules::is_operator;

/// What the operator lets namespaces take from joch's host (each list
/// empty by default: nothing).
#[derive(Debug, Clone, Default)]
pub struct HostAccess {
    /// Command lines a stdio `McpServer` may run (globs over the program
    /// and its arguments joined by spaces: `npx -y @modelcontextprotocol/*`).
    pub stdio_commands: Vec<String>,
    /// Prefixes of the environment variables a secret reference may name
    /// (`CRM_`); never `JOCH_`.
    pub secret_env_prefixes: Vec<String>,
    /// Directories whose files a secret reference may name.
    pub secret_dirs: Vec<PathBuf>,
    /// joch's own secret files (its audit signing key, its vault key
    /// file), which no reference may name.
    pub own_files: Vec<PathBuf>,
}

/// Refuses what `by` may not take from the host, every problem at its
/// field with the allow-list that would admit it.
pub(crate) fn may_use_host(
    by: &Principal,
    access: &HostAccess,
    uses: &[HostUse<'_>],
) -> Result<(), EngineError> {
    let operator = is_operator(by);
    let problems: Vec<FieldError> = uses
        .iter()
        .filter_map(|use_| refusal(operator, access, use_))
        .collect();
    match problems.is_empty() {
        true => Ok(()),
        false => Err(ValidationError(problems).into()),
    }
}

fn refusal(operator: bool, access: &HostAccess, use_: &HostUse<'_>) -> Option<FieldError> {
    let (field, message) = match use_ {
        HostUse::Env { field, name } if name.starts_with(OWN_ENV_PREFIX) => (
            field,
            format!("{name} is one of joch's own settings; no reference may read a JOCH_ variable"),
        ),
        HostUse::File { field, path } if !Path::new(path).is_absolute() || has_parent(path) => (
            field,
            format!("{path:?} must be an absolute path without '..'"),
        ),
        HostUse::File { field, path }
            if access.own_files.iter().any(|own| same_file(own, path)) =>
        {
            (field, format!("{path} is one of joch's own secret files"))
        }
        _ if operator => return None,
        HostUse::Env { field, name } => {
            if access
                .secret_env_prefixes
                .iter()
                .any(|p| !p.is_empty() && name.starts_with(p.as_str()))
            {
                return None;
            }
            (
                field,
                format!(
                    "{name} is not among the variables joch's operator lets namespaces read \
                     (--secret-env-prefix: {})",
                    listed(&access.secret_env_prefixes)
                ),
            )
        }
        HostUse::File { field, path } => {
            if access
                .secret_dirs
                .iter()
                .any(|dir| Path::new(path).starts_with(dir))
            {
                return None;
            }
            let dirs: Vec<String> = access
                .secret_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            (
                field,
                format!(
                    "{path} is not in a directory joch's operator lets namespaces read \
                     (--secret-dir: {})",
                    listed(&dirs)
                ),
            )
        }
        HostUse::Command { field, line } => {
            if access.stdio_commands.iter().any(|glob| matches(glob, line)) {
                return None;
            }
            (
                field,
                format!(
                    "{line:?} is not a command joch's operator lets namespaces run \
                     (--allow-stdio-command: {})",
                    listed(&access.stdio_commands)
                ),
            )
        }
        HostUse::CommandEnv { field } => (
            field,
            "only joch's operator may set a stdio server's environment".to_owned(),
        ),
    };
    Some(FieldError {
        field: field.clone(),
        message,
    })
}

fn listed(items: &[String]) -> String {
    match items.is_empty() {
        true => "none".to_owned(),
        false => items.join(", "),
    }
}

fn matches(glob: &str, line: &str) -> bool {
    Glob::new(glob).is_ok_and(|g| g.compile_matcher().is_match(line))
}

fn has_parent(path: &str) -> bool {
    Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
}

/// The same file, also through a link or another spelling of its path.
fn same_file(own: &Path, path: &str) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    own == Path::new(path) || canonical(own) == canonical(Path::new(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> HostAccess {
        HostAccess {
            stdio_commands: vec!["npx -y @modelcontextprotocol/*".to_owned()],
            secret_env_prefixes: vec!["CRM_".to_owned()],
            secret_dirs: vec![PathBuf::from("/run/secrets")],
            own_files: vec![PathBuf::from("/etc/joch/audit.key")],
        }
    }

    fn admin() -> Principal {
        let mut admin = Principal::local();
        admin.kind = joch_core::PrincipalKind::Token;
        admin.namespaces = joch_core::Namespaces::one("team-a");
        admin.role = joch_core::token::Role::Admin;
        admin
    }

    fn env(name: &str) -> HostUse<'_> {
        HostUse::Env {
            field: "f".to_owned(),
            name,
        }
    }

    fn file(path: &str) -> HostUse<'_> {
        HostUse::File {
            field: "f".to_owned(),
            path,
        }
    }

    fn command(line: &str) -> HostUse<'static> {
        HostUse::Command {
            field: "f".to_owned(),
            line: line.to_owned(),
        }
    }

    #[test]
    fn a_namespace_admin_within_the_lists_only() {
        let (admin, access) = (admin(), access());
        let allowed = [
            env("CRM_KEY"),
            file("/run/secrets/crm"),
            command("npx -y @modelcontextprotocol/server-everything"),
        ];
        for use_ in allowed {
            assert!(
                may_use_host(&admin, &access, std::slice::from_ref(&use_)).is_ok(),
                "{use_:?}"
            );
        }
        let refused = [
            env("JOCH_ADMIN_TOKEN"),
            env("HOME"),
            file("/etc/passwd"),
            file("/run/secrets/../../etc/passwd"),
            file("relative/key"),
            file("/etc/joch/audit.key"),
            command("/bin/sh -c id"),
            HostUse::CommandEnv {
                field: "f".to_owned(),
            },
        ];
        for use_ in refused {
            assert!(
                may_use_host(&admin, &access, std::slice::from_ref(&use_)).is_err(),
                "{use_:?}"
            );
        }
    }

    #[test]
    fn the_operator_anything_but_joch_own_secrets() {
        let (local, access) = (Principal::local(), HostAccess::default());
        for use_ in [env("HOME"), file("/etc/hostname"), command("/bin/sh -c id")] {
            assert!(
                may_use_host(&local, &access, std::slice::from_ref(&use_)).is_ok(),
                "{use_:?}"
            );
        }
        let access = self::access();
        for use_ in [env("JOCH_VAULT_KEY"), file("/etc/joch/audit.key")] {
            assert!(
                may_use_host(&local, &access, std::slice::from_ref(&use_)).is_err(),
                "{use_:?}"
            );
        }
    }
}
