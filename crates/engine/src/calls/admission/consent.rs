//! The consent check: a declarative tool whose Endpoint, or an MCP tool
//! whose McpServer, takes each end user's own token (`oauth2`
//! `authorization_code`, `perUser`) runs with
//! the token of the call's user ([`rules::upstream_user`]). When the vault
//! holds none it can use (none yet, revoked, or no longer refreshable),
//! the call waits for the user's consent, as an Approval of kind
//! `consent` whose payload holds the authorization URL.
//!
//! An upstream with `token_exchange` runs with the caller's own token:
//! the JWT the caller presented is exchanged now, while joch holds it
//! (RFC 8693), and the result kept in the vault for the run; a caller
//! without a JWT is refused.
//!
//! A call that waits for a person already (a policy's or the tool's
//! approval) is asked for consent once the person approved it, if its
//! user holds no token then ([`Engine::consent_after_approval`]).

use joch_core::credential::{Grant, OAuth2, UpstreamRef};
use joch_core::{Backend, CallError, CallMode, ErrorCode, Phase, Principal, ToolCall};
use joch_store::StoreErrorKind;

use super::admitting::{Admitting, Verdict};
use crate::approvals::deadline;
use crate::calls::Rejection;
use crate::calls::deferral::Deferral;
use crate::rules;
use crate::vault::ConsentAsk;
use crate::{Calls, EngineError};

/// An upstream of the tool that takes each end user's own token.
struct PerUser {
    upstream: UpstreamRef,
    url: String,
    oauth2: OAuth2,
}

impl Calls {
    /// The upstreams of `tool` taking per-user tokens: the Endpoints of a
    /// declarative tool, or an MCP tool's server (missing ones are left to
    /// the run, which reports them).
    async fn per_user_upstreams(
        &self,
        namespace: &str,
        backend: &Backend,
    ) -> Result<Vec<PerUser>, EngineError> {
        let mut found = Vec::new();
        let catalog = &self.inner.catalog;
        match backend {
            Backend::Actions(actions) => {
                for (_, name) in actions.endpoints() {
                    let endpoint = match catalog.endpoint(namespace, name).await {
                        Ok(endpoint) => endpoint,
                        Err(e) if e.kind() == StoreErrorKind::NotFound => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let oauth2 = endpoint.spec.auth.as_ref().and_then(|a| a.oauth2.clone());
                    if let Some(oauth2) = oauth2.filter(OAuth2::takes_user) {
                        let upstream = UpstreamRef::endpoint(name);
                        found.push(PerUser {
                            upstream,
                            url: endpoint.spec.url.clone(),
                            oauth2,
                        });
                    }
                }
            }
            Backend::Mcp(mcp) => {
                let server = match catalog.mcp_server(namespace, &mcp.server).await {
                    Ok(server) => server,
                    Err(e) if e.kind() == StoreErrorKind::NotFound => return Ok(found),
                    Err(e) => return Err(e.into()),
                };
                if let Some(http) = &server.spec.http {
                    if let Some(oauth2) = http.per_user().cloned() {
                        let upstream = UpstreamRef::mcp_server(&mcp.server);
                        found.push(PerUser {
                            upstream,
                            url: http.url.clone(),
                            oauth2,
                        });
                    }
                }
            }
            _ => {}
        }
        Ok(found)
    }

    pub(super) async fn upstream_consent(
        &self,
        a: &mut Admitting<'_>,
    ) -> Result<Verdict, EngineError> {
        let Some(by) = a.by else {
            return Ok(Verdict::Continue);
        };
        if a.call.spec.mode == CallMode::Hook {
            return Ok(Verdict::Continue);
        }
        let namespace = a.call.metadata.namespace.clone();
        let upstreams = self
            .per_user_upstreams(&namespace, &a.tool.spec.backend)
            .await?;
        for PerUser {
            upstream,
            url,
            oauth2,
        } in upstreams
        {
            if oauth2.grant == Grant::TokenExchange {
                a.call.status.upstream_user = Some(by.name.clone());
                match self.exchange(by, &a.call, &upstream, &url, &oauth2).await {
                    Ok(()) => continue,
                    Err(error) => {
                        let rejection = Rejection::refused(
                            &a.call,
                            Phase::Failed,
                            "Token exchange failed",
                            ErrorCode::UpstreamAuthFailed,
                            error.message,
                        );
                        return Ok(Verdict::Reject(rejection));
                    }
                }
            }
            let trusted = self
                .inner
                .catalog
                .namespace(&namespace)
                .await?
                .spec
                .trust_caller_id;
            let user = match rules::upstream_user(by, &a.call, trusted) {
                Ok(user) => user,
                Err(reason) => {
                    return Ok(Verdict::Reject(Rejection::refused(
                        &a.call,
                        Phase::Denied,
                        "Caller id not trusted",
                        ErrorCode::CallerIdNotTrusted,
                        reason,
                    )));
                }
            };
            a.call.status.upstream_user = Some(user.clone());
            if a.deferral.is_some() {
                // A person decides first; the consent is asked once they
                // approved (`consent_after_approval`).
                continue;
            }
            match self.needs_consent(a, &upstream, &url, &oauth2, &user).await {
                Ok(Some(deferral)) => return Ok(Verdict::Defer(deferral)),
                Ok(None) => {}
                // The user cannot be sent to consent (discovery refused
                // the upstream's metadata, say): the call ends saying why.
                Err(error) => {
                    return Ok(Verdict::Reject(Rejection::refused(
                        &a.call,
                        Phase::Failed,
                        "Consent cannot begin",
                        ErrorCode::UpstreamAuthFailed,
                        error.message,
                    )));
                }
            }
        }
        Ok(Verdict::Continue)
    }

    /// The consent an approved call still waits for: a person approved
    /// it, and its user (recorded at admission) holds no token for one of
    /// its per-user upstreams. Asked after the approval, not before, so
    /// that a call a person rejects never sent its user to an
    /// authorization server, and no consent is under way for it.
    pub(in crate::calls) async fn consent_after_approval(
        &self,
        a: &Admitting<'_>,
    ) -> Result<Option<Deferral>, EngineError> {
        let Some(user) = a.call.status.upstream_user.clone() else {
            return Ok(None);
        };
        let namespace = &a.call.metadata.namespace;
        let upstreams = self
            .per_user_upstreams(namespace, &a.tool.spec.backend)
            .await?;
        for PerUser {
            upstream,
            url,
            oauth2,
        } in upstreams
        {
            if oauth2.grant == Grant::TokenExchange {
                continue;
            }
            if let Ok(Some(deferral)) = self.needs_consent(a, &upstream, &url, &oauth2, &user).await
            {
                return Ok(Some(deferral));
            }
        }
        Ok(None)
    }

    /// Exchanges the caller's JWT for its token at `upstream` (RFC 8693),
    /// unless the vault holds a fresh one of the caller's already.
    async fn exchange(
        &self,
        by: &Principal,
        call: &ToolCall,
        upstream: &UpstreamRef,
        url: &str,
        oauth2: &OAuth2,
    ) -> Result<(), CallError> {
        let Some(subject) = by.presented.token() else {
            return Err(CallError::new(
                ErrorCode::UpstreamAuthFailed,
                format!(
                    "{} {:?} exchanges the caller's JWT for its token (token_exchange), and this caller did not authenticate with a JWT",
                    upstream.kind, upstream.name
                ),
            ));
        };
        let Some(credentials) = self.inner.settings.credentials.as_ref() else {
            return Err(CallError::new(
                ErrorCode::UpstreamAuthFailed,
                "this joch has no token vault",
            ));
        };
        let ns = &call.metadata.namespace;
        credentials
            .exchange(ns, (upstream, &by.name), url, oauth2, subject)
            .await
    }

    /// The consent the call waits for, when the vault holds no token of
    /// `user` for `upstream`. Any other trouble with the token is left to
    /// the call's run, which fails with the reason; `Err`: the consent is
    /// needed and cannot begin (why, for the caller).
    async fn needs_consent(
        &self,
        a: &Admitting<'_>,
        upstream: &UpstreamRef,
        url: &str,
        oauth2: &OAuth2,
        user: &str,
    ) -> Result<Option<Deferral>, CallError> {
        use joch_core::credential::UpstreamCredentials as _;
        let Some(credentials) = self.inner.settings.credentials.as_ref() else {
            return Ok(None);
        };
        let ns = &a.call.metadata.namespace;
        let Err(error) = credentials
            .authorization(ns, upstream, url, oauth2, Some(user))
            .await
        else {
            return Ok(None);
        };
        if error.code != ErrorCode::ConsentRequired.as_str() {
            return Ok(None);
        }
        let Some(public_url) = self.inner.settings.public_url.as_deref() else {
            return Ok(None);
        };
        let redirect_uri = &crate::vault::callback_url(public_url);
        let routing = joch_core::policy::ApprovalRouting::default();
        let timeout = deadline::timeout(&routing, &a.tool, self.inner.settings.approval_timeout);
        let Ok(expires_at) = deadline::deadline(crate::clock::now(), timeout) else {
            return Ok(None);
        };
        let ask = ConsentAsk {
            namespace: ns,
            call: &a.call.metadata.name,
            user,
            upstream,
            url,
            oauth2,
            redirect_uri,
            expires_at,
        };
        let consent_url = credentials.begin_consent(ask).await.inspect_err(|e| {
            tracing::warn!(upstream = %upstream.name, error = %e.message, "a consent could not begin");
        })?;
        let reason = format!(
            "{user:?} has not consented to joch calling {} {:?} for them: open the consentUrl",
            upstream.kind, upstream.name
        );
        Ok(Some(Deferral::consent(consent_url, reason, timeout)))
    }
}
