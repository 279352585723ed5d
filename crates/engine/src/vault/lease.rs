//! One refresh across replicas: before asking the token endpoint, a replica
//! marks the credential's record as being refreshed (`spec.refreshingUntil`)
//! with a conditional write; the store lets one write win. The others wait
//! for the record to hold a fresh token, or for the mark to lapse (the
//! winner died) and then claim it themselves.

use std::time::Duration;

use chrono::Utc;
use joch_core::credential::{Credential, CredentialSpec, OAuth2, UpstreamRef};
use joch_core::{CallError, ObjectMeta, Time};
use joch_store::{Durability, StoreError};

use super::{Credentials, failed};

/// How long a replica may take to refresh before another may try.
pub(super) const REFRESH_LEASE: Duration = Duration::from_secs(20);

/// How often a waiting replica reads the record again.
const POLL: Duration = Duration::from_millis(100);

/// The outcome of a claim.
pub(super) enum Claim {
    /// This replica refreshes; the record is as its claim wrote it.
    Won(Box<Credential>),
    /// Another replica is refreshing; read again after a pause.
    Busy,
}

impl Credentials {
    /// Marks `stored` (or a new placeholder record) as being refreshed by
    /// this replica, unless another replica's mark is still current.
    pub(super) async fn claim(
        &self,
        namespace: &str,
        (upstream, user): (&UpstreamRef, Option<&str>),
        oauth2: &OAuth2,
        stored: Option<Credential>,
    ) -> Result<Claim, CallError> {
        let now = Utc::now();
        let until = Time(now + chrono::Duration::from_std(REFRESH_LEASE).expect("small"));
        let written = match stored {
            Some(c) if c.spec.refreshing_until.is_some_and(|t| t.0 > now) => {
                return Ok(Claim::Busy);
            }
            Some(mut credential) => {
                credential.spec.refreshing_until = Some(until);
                self.store
                    .update_object(&mut credential, Durability::Sync)
                    .await
                    .map(|()| credential)
            }
            None => {
                let mut placeholder = Credential {
                    api_version: joch_core::API_VERSION.to_owned(),
                    kind: <Credential as joch_core::Object>::KIND.to_owned(),
                    metadata: ObjectMeta {
                        name: Credential::name_for(upstream, user),
                        namespace: namespace.to_owned(),
                        creation_timestamp: Some(Time(now)),
                        ..ObjectMeta::default()
                    },
                    spec: CredentialSpec {
                        upstream: upstream.clone(),
                        user: user.map(str::to_owned),
                        grant: oauth2.grant,
                        scope: None,
                        obtained_at: Time(now),
                        expires_at: None,
                        key_id: String::new(),
                        sealed: String::new(),
                        refreshing_until: Some(until),
                    },
                };
                self.store
                    .create_object(&mut placeholder, Durability::Sync)
                    .await
                    .map(|()| placeholder)
            }
        };
        match written {
            Ok(credential) => Ok(Claim::Won(Box::new(credential))),
            Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => Ok(Claim::Busy),
            Err(e) => Err(failed(format!("the token vault cannot be written: {e}"))),
        }
    }

    /// Gives up a claim after a failed request, so that the next call
    /// tries again at once: a placeholder is deleted, a mark removed.
    pub(super) async fn release(&self, mut claimed: Credential) {
        let meta = &claimed.metadata;
        let released = if claimed.spec.sealed.is_empty() {
            let version = Some(meta.resource_version.as_str());
            self.store
                .delete_object::<Credential>(&meta.namespace, &meta.name, version)
                .await
                .map(drop)
        } else {
            claimed.spec.refreshing_until = None;
            self.store
                .update_object(&mut claimed, Durability::Sync)
                .await
        };
        if let Err(e) = released {
            tracing::debug!(error = %e, "a refresh claim not released; it lapses");
        }
    }

    /// Deletes a claimed user's credential whose grant is gone: the next
    /// call asks for their consent again.
    pub(super) async fn forget(&self, claimed: Credential) {
        let meta = &claimed.metadata;
        let version = Some(meta.resource_version.as_str());
        if let Err(e) = self
            .store
            .delete_object::<Credential>(&meta.namespace, &meta.name, version)
            .await
        {
            tracing::debug!(error = %e, "a dead credential not deleted; another replica did");
        }
    }

    /// Waits a moment before reading a record another replica refreshes.
    pub(super) async fn pause() {
        tokio::time::sleep(POLL).await;
    }
}
