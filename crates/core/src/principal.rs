//! Who is acting: the `Principal` every engine entry point takes, and the
//! part of it a record keeps (`PrincipalRef`). The rules that read them
//! (who may decide, which tools exist for whom) live in the engine.

use serde::{Deserialize, Serialize};

use crate::token::Role;

/// How a principal was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// No authentication is configured: the caller on this machine's
    /// loopback, or an embedding program. It has no identity to compare,
    /// so the rules that compare identities do not apply to it.
    Local,
    /// The operator's root token.
    Root,
    /// A joch `ApiToken`, by name.
    Token,
    /// A JWT of the configured identity provider, by `sub`.
    Jwt,
}

impl PrincipalKind {
    /// `local`, `root`, `token`, `jwt`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Local => "local",
            PrincipalKind::Root => "root",
            PrincipalKind::Token => "token",
            PrincipalKind::Jwt => "jwt",
        }
    }
}

/// Which tools exist for a principal: a tool must match one of `names`
/// (globs, `crm.*`) when any are given, and `labels` (a label selector,
/// `team=crm`) when it is given. Tools outside it are, for that principal,
/// tools that do not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSelector {
    /// Name globs; empty: any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// A label selector over the Tool's labels; absent: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
}

/// The JWT a caller presented, kept in memory only, for token exchange
/// (RFC 8693) on the caller's behalf: never shown by `Debug`, never
/// serialised, and ignored when principals are compared.
#[derive(Clone, Default)]
pub struct Presented(Option<std::sync::Arc<str>>);

impl Presented {
    /// The JWT `token`.
    pub fn jwt(token: &str) -> Self {
        Presented(Some(token.into()))
    }

    /// The JWT, if the caller presented one.
    pub fn token(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Presented(..)"
        } else {
            "None"
        })
    }
}

impl PartialEq for Presented {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Presented {}

/// The namespaces a principal acts in. In any other it finds nothing, as
/// if the namespace did not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace (the root token, the local caller).
    Every,
    /// These, sorted, without repeats, never empty: one for a token, one
    /// or more for a JWT.
    Only(Vec<String>),
}

impl Namespaces {
    /// Exactly `namespace`.
    pub fn one(namespace: impl Into<String>) -> Self {
        Namespaces::Only(vec![namespace.into()])
    }

    /// These namespaces, sorted and without repeats; `None` if there are none.
    pub fn several(namespaces: impl IntoIterator<Item = String>) -> Option<Self> {
        let set: std::collections::BTreeSet<String> = namespaces.into_iter().collect();
        (!set.is_empty()).then(|| Namespaces::Only(set.into_iter().collect()))
    }

    /// True when `namespace` is among them.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::Every => true,
            Namespaces::Only(list) => list.iter().any(|n| n == namespace),
        }
    }

    /// True for more than one namespace.
    pub fn are_several(&self) -> bool {
        match self {
            Namespaces::Every => true,
            Namespaces::Only(list) => list.len() > 1,
        }
    }

    /// The list, unless they are every namespace.
    pub fn listed(&self) -> Option<&[String]> {
        match self {
            Namespaces::Every => None,
            Namespaces::Only(list) => Some(list),
        }
    }

    /// How keys and logs spell them: `*` for every one, else the names
    /// joined by `,`.
    pub fn key(&self) -> String {
        match self {
            Namespaces::Every => "*".to_owned(),
            Namespaces::Only(list) => list.join(","),
        }
    }
}

/// An authenticated caller, or the local one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// How it was authenticated.
    pub kind: PrincipalKind,
    /// The token's name, the JWT's `sub`, `root`, or `local`.
    pub name: String,
    /// The namespaces it acts in: every one for root and local, its own
    /// for a token, the claimed ones for a JWT.
    pub namespaces: Namespaces,
    /// What it may do.
    pub role: Role,
    /// The tools that exist for it; `None`: every tool of its namespace.
    pub tools: Option<ToolSelector>,
    /// The JWT it presented, for token exchange (JWT principals only).
    pub presented: Presented,
}

impl Principal {
    /// The caller when no authentication is configured.
    pub fn local() -> Self {
        Principal {
            kind: PrincipalKind::Local,
            name: "local".to_owned(),
            namespaces: Namespaces::Every,
            role: Role::Admin,
            tools: None,
            presented: Default::default(),
        }
    }

    /// The operator's root token: admin in every namespace.
    pub fn root() -> Self {
        Principal {
            kind: PrincipalKind::Root,
            name: "root".to_owned(),
            namespaces: Namespaces::Every,
            role: Role::Admin,
            tools: None,
            presented: Default::default(),
        }
    }

    /// True for a principal that carries an identity (not `local`).
    pub fn is_authenticated(&self) -> bool {
        self.kind != PrincipalKind::Local
    }

    /// What a record keeps of it.
    pub fn reference(&self) -> PrincipalRef {
        PrincipalRef {
            kind: self.kind,
            name: self.name.clone(),
            role: self.role,
        }
    }

    /// True when `made_by` names this very principal (and it has an
    /// identity: two local callers are not known to be the same).
    pub fn is(&self, made_by: &PrincipalRef) -> bool {
        self.is_authenticated() && made_by.kind == self.kind && made_by.name == self.name
    }
}

/// Who made a call or decided an approval, as joch recorded it. Set by
/// joch only: a value a client sends is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrincipalRef {
    /// How it was authenticated.
    pub kind: PrincipalKind,
    /// Its name (token name, JWT `sub`, `root` or `local`).
    pub name: String,
    /// Its role then.
    pub role: Role,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str) -> Principal {
        Principal {
            kind: PrincipalKind::Token,
            name: name.to_owned(),
            namespaces: Namespaces::one("default"),
            role: Role::Approver,
            tools: None,
            presented: Default::default(),
        }
    }

    #[test]
    fn a_principal_is_itself_only_by_kind_and_name() {
        let alice = token("alice");
        assert!(alice.is(&alice.reference()));
        assert!(!alice.is(&token("bob").reference()));
        let jwt_alice = Principal {
            kind: PrincipalKind::Jwt,
            ..token("alice")
        };
        assert!(
            !alice.is(&jwt_alice.reference()),
            "a JWT sub is not a token of the same name"
        );
    }

    #[test]
    fn the_local_caller_has_no_identity_to_compare() {
        let local = Principal::local();
        assert!(!local.is(&local.reference()));
        assert!(!local.is_authenticated());
    }
}
