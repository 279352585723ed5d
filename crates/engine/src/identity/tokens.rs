//! Who is calling: bearer tokens bound to a namespace and a role, and the
//! root token an operator gives the server. Tokens are stored hashed; a
//! snapshot of every token maps hashes to principals, dropped on each
//! token write.

use joch_core::token::{ApiToken, ApiTokenSpec, Role, hash};
use joch_core::{Namespaces, Object, ObjectMeta, Principal, PrincipalKind, ToolSelector};

use super::Identity;
use crate::EngineError;
use crate::rules::{Action, Collection, may_in};

/// How JWTs of an identity provider (OIDC) are verified and mapped to a
/// principal: signature by a key of `keys` (by `kid`), `iss` as configured,
/// an `aud` among `audiences`, not expired; `sub` is the principal's name,
/// the `namespace` claim (one name, or a list of them) its namespaces, the
/// `role` claim its role, and the optional `joch_tools` claim (`{"names":
/// ["crm.*"], "labels": "team=crm"}`) the tools that exist for it.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The expected `iss`.
    pub issuer: String,
    /// The `aud` values accepted: a JWT must carry one of them. `{namespace}`
    /// in one stands for one of the JWT's own namespaces, and the JWT then
    /// acts in those namespaces only whose audience it carries, so a token
    /// issued for one namespace's resource is refused for any other.
    pub audiences: Vec<String>,
    /// The provider's signing keys (its JWKS).
    pub keys: jsonwebtoken::jwk::JwkSet,
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    namespace: OneOrMany,
    role: Role,
    #[serde(default)]
    joch_tools: Option<ToolSelector>,
    aud: OneOrMany,
    #[serde(default)]
    nonce: Option<String>,
}

/// A claim of one string or several (`aud`: RFC 7519 §4.1.3).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn all(&self) -> &[String] {
        match self {
            OneOrMany::One(one) => std::slice::from_ref(one),
            OneOrMany::Many(many) => many,
        }
    }

    fn contains(&self, wanted: &str) -> bool {
        self.all().iter().any(|value| value == wanted)
    }
}

impl JwtConfig {
    /// The principal of an access token: its `aud` one of `audiences`, in
    /// the namespaces that audience allows.
    fn principal(&self, token: &str) -> Option<Principal> {
        self.verified(token, |claims, namespace| {
            self.audiences
                .iter()
                .any(|aud| claims.aud.contains(&aud.replace("{namespace}", namespace)))
        })
    }

    /// The principal of an OpenID Connect ID token issued to the console
    /// (`aud` = `client_id`) for the sign-in that sent `nonce`: verified
    /// and mapped to a principal exactly as an access token is.
    pub fn id_token_principal(
        &self,
        id_token: &str,
        client_id: &str,
        nonce: &str,
    ) -> Option<Principal> {
        self.verified(id_token, |claims, _| {
            claims.aud.contains(client_id) && claims.nonce.as_deref() == Some(nonce)
        })
    }

    /// Checks the signature (by a key of the JWKS), `iss`, `exp`, the
    /// namespace claim and then, for each claimed namespace, `accepts`
    /// (read only once the claims are, as an accepted audience may name the
    /// namespace): the principal acts in the namespaces accepted, and there
    /// is none if no namespace is.
    fn verified(&self, token: &str, accepts: impl Fn(&Claims, &str) -> bool) -> Option<Principal> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        let jwk = match &header.kid {
            Some(kid) => self.keys.find(kid)?,
            None => self.keys.keys.first()?,
        };
        let key = jsonwebtoken::DecodingKey::from_jwk(jwk).ok()?;
        let mut validation = jsonwebtoken::Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .ok()?
            .claims;
        let claimed = claims.namespace.all();
        if claimed.is_empty()
            || claimed
                .iter()
                .any(|ns| joch_core::names::validate_namespace(ns).is_err())
        {
            return None;
        }
        let accepted = claimed.iter().filter(|ns| accepts(&claims, ns)).cloned();
        Some(Principal {
            kind: PrincipalKind::Jwt,
            namespaces: Namespaces::several(accepted)?,
            name: claims.sub,
            role: claims.role,
            tools: claims.joch_tools,
            presented: joch_core::principal::Presented::jwt(token),
        })
    }
}

impl Identity {
    /// The principal of the root token or joch token with this hash, if any.
    pub(super) async fn principal_by_hash(
        &self,
        hashed: &str,
    ) -> Result<Option<Principal>, EngineError> {
        if self.root_token_hash.as_deref() == Some(hashed) {
            return Ok(Some(Principal::root()));
        }
        Ok(self.catalog.tokens().await?.get(hashed).cloned())
    }

    /// Whether requests must carry a token: once a root token or an
    /// identity provider is configured, or any token exists.
    pub async fn auth_required(&self) -> Result<bool, EngineError> {
        Ok(self.root_token_hash.is_some()
            || self.jwt.is_some()
            || !self.catalog.tokens().await?.is_empty())
    }

    /// The principal a bearer token stands for, if any: a JWT of the
    /// configured identity provider, the root token, or a joch token.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>, EngineError> {
        if let Some(jwt) = &self.jwt {
            if token.matches('.').count() == 2 {
                return Ok(jwt.principal(token));
            }
        }
        self.principal_by_hash(&hash(token)).await
    }

    /// The namespace's tokens (hashes included; surfaces show names,
    /// roles and selectors). Only an admin may list them.
    pub async fn list_tokens(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<ApiToken>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Tokens))?;
        let params = crate::ListParams {
            limit: Some(5_000),
            ..crate::ListParams::default()
        };
        Ok(self.resources.list(namespace, params).await?.items)
    }

    /// Issues a token as `by` (an admin), as [`Identity::create_token`](crate::Identity::create_token).
    pub async fn issue_token(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        role: Role,
        tools: Option<ToolSelector>,
    ) -> Result<(ApiToken, String), EngineError> {
        may_in(by, namespace, &Action::Write(Collection::Tokens))?;
        self.create_token(namespace, name, role, tools).await
    }

    /// Revokes a token as `by` (an admin): it stops authenticating at
    /// once, and so do the console sessions opened with it.
    pub async fn revoke_token(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<ApiToken, EngineError> {
        self.resources.delete(by, namespace, name, None).await
    }

    /// Creates a token; returns it with its secret, which is not stored
    /// and cannot be shown again.
    pub async fn create_token(
        &self,
        namespace: &str,
        name: &str,
        role: Role,
        tools: Option<ToolSelector>,
    ) -> Result<(ApiToken, String), EngineError> {
        let secret = format!(
            "joch_{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let token = ApiToken {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: ApiToken::KIND.to_owned(),
            metadata: ObjectMeta {
                name: name.to_owned(),
                ..ObjectMeta::default()
            },
            spec: ApiTokenSpec {
                role,
                hash: hash(&secret),
                tools,
            },
        };
        let token = self
            .resources
            .create(&Principal::local(), namespace, token)
            .await?;
        Ok((token, secret))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const SECRET: &[u8] = b"a-secret-of-the-unit-test-identity-provider";
    const BASE: &str = "https://joch.example";

    fn config(audiences: &[&str]) -> JwtConfig {
        let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
        let keys = json!({"keys": [{"kty": "oct", "kid": "k1", "alg": "HS256", "k": k}]});
        JwtConfig {
            issuer: "https://idp.example".to_owned(),
            audiences: audiences.iter().map(|a| (*a).to_owned()).collect(),
            keys: serde_json::from_value(keys).expect("a JWKS"),
        }
    }

    fn jwt(aud: serde_json::Value, namespace: &str) -> String {
        jwt_with(aud, namespace, json!({}))
    }

    fn jwt_with(aud: serde_json::Value, namespace: &str, extra: serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".to_owned());
        let mut claims = json!({"sub": "carol", "iss": "https://idp.example", "aud": aud,
            "exp": chrono::Utc::now().timestamp() + 600, "namespace": namespace, "role": "agent"});
        if let (Some(claims), Some(extra)) = (claims.as_object_mut(), extra.as_object()) {
            claims.extend(extra.clone());
        }
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(SECRET)).expect("signed")
    }

    #[test]
    fn a_jwt_must_carry_an_accepted_audience() {
        let resources = config(&[BASE, "https://joch.example/v1/namespaces/{namespace}/mcp"]);
        let cases = [
            (json!(BASE), "support", true),
            (json!(["https://other.example", BASE]), "support", true),
            (
                json!("https://joch.example/v1/namespaces/support/mcp"),
                "support",
                true,
            ),
            (
                json!("https://joch.example/v1/namespaces/support/mcp"),
                "sales",
                false,
            ),
            (
                json!("https://joch.example/v1/namespaces/{namespace}/mcp"),
                "support",
                false,
            ),
            (json!("https://other.example"), "support", false),
            (json!([]), "support", false),
        ];
        for (aud, namespace, accepted) in cases {
            let principal = resources.principal(&jwt(aud.clone(), namespace));
            assert_eq!(principal.is_some(), accepted, "aud {aud} in {namespace}");
        }
        let exact = config(&["joch"]);
        assert!(exact.principal(&jwt(json!("joch"), "support")).is_some());
        assert!(exact.principal(&jwt(json!(BASE), "support")).is_none());
    }

    #[test]
    fn a_jwt_acts_in_the_claimed_namespaces_its_audience_allows() {
        const MCP: &str = "https://joch.example/v1/namespaces/{namespace}/mcp";
        let idp = config(&[BASE, MCP]);
        let namespaces = |aud: serde_json::Value, claimed: serde_json::Value| {
            let token = jwt_with(aud, "", json!({ "namespace": claimed }));
            idp.principal(&token).map(|p| p.namespaces)
        };
        let both = Namespaces::Only(vec!["sales".to_owned(), "support".to_owned()]);
        assert_eq!(
            namespaces(json!(BASE), json!(["support", "sales"])),
            Some(both)
        );
        let support_mcp = json!("https://joch.example/v1/namespaces/support/mcp");
        assert_eq!(
            namespaces(support_mcp.clone(), json!(["support", "sales"])),
            Some(Namespaces::one("support")),
            "an audience of one namespace's resource binds to that namespace only"
        );
        assert_eq!(namespaces(support_mcp, json!(["sales"])), None);
        assert_eq!(namespaces(json!(BASE), json!([])), None, "no namespace");
        assert_eq!(
            namespaces(json!(BASE), json!(["support", "Not A Namespace"])),
            None,
            "one invalid name refuses the token"
        );
    }

    #[test]
    fn an_id_token_is_the_consoles_for_its_own_sign_in() {
        let idp = config(&[BASE]);
        let id = jwt_with(json!("console"), "support", json!({"nonce": "n1"}));
        let principal = idp.id_token_principal(&id, "console", "n1");
        assert_eq!(principal.map(|p| p.name).as_deref(), Some("carol"));
        assert!(
            idp.id_token_principal(&id, "console", "n2").is_none(),
            "another sign-in"
        );
        assert!(
            idp.id_token_principal(&id, "other", "n1").is_none(),
            "another client"
        );
        let access = jwt(json!(BASE), "support");
        assert!(idp.id_token_principal(&access, "console", "n1").is_none());
        assert!(idp.principal(&id).is_none(), "not an access token for joch");
    }
}
