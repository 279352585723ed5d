//! Token exchange (RFC 8693): the JWT a caller presented to joch is
//! exchanged at the upstream's authorization server for a token that acts
//! on the caller's behalf. The exchange happens when the call is made (the
//! JWT lives only in memory, with the request); the token is kept sealed
//! per (namespace, user, upstream) and reused until it nears expiry.

use joch_core::CallError;
use joch_core::credential::{Credential, OAuth2, TokenGrant, UpstreamRef};

use super::{Credentials, failed};

impl Credentials {
    /// Makes sure the vault holds a fresh token of `user` for `upstream`:
    /// the kept one, else one obtained now by exchanging `subject_token`
    /// (the caller's JWT). Errors name the server's refusal, never a token.
    pub async fn exchange(
        &self,
        namespace: &str,
        (upstream, user): (&UpstreamRef, &str),
        url: &str,
        oauth2: &OAuth2,
        subject_token: &str,
    ) -> Result<(), CallError> {
        let keys = self.keys.as_ref().ok_or_else(|| {
            failed("no vault key is configured (JOCH_VAULT_KEY or --vault-key-file): token exchange needs one")
        })?;
        let oauth2 = &*self.client(oauth2)?;
        let name = Credential::name_for(upstream, Some(user));
        let lock = self.lock(format!("{namespace}/{name}"));
        let _one_at_a_time = lock.lock().await;
        let mut stored = self.stored(namespace, &name).await?;
        if let Some(credential) = stored.as_mut() {
            if self.usable(keys, credential, oauth2).await.is_some() {
                return Ok(());
            }
        }
        let grant = TokenGrant::Exchange {
            subject_token: subject_token.to_owned(),
        };
        let token = self
            .endpoint
            .request(oauth2, url, &grant)
            .await
            .map_err(|e| {
                failed(format!(
                    "the token exchange for {} {:?} failed: {e}",
                    upstream.kind, upstream.name
                ))
            })?;
        let who = (upstream, Some(user));
        if let Err(e) = self
            .keep(keys, namespace, who, oauth2, &token, stored, None)
            .await
        {
            // Kept by a racing call meanwhile: as good.
            tracing::debug!(credential = %name, error = %e, "exchanged token not kept");
        }
        Ok(())
    }
}
