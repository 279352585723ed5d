//! Artifact contents in the shared database (`blobs` table), so replicas
//! need no shared directory: what one stores, all read.

use std::collections::HashSet;
use std::io;
use std::time::Duration;

use async_trait::async_trait;
use joch_core::artifact::is_sha256;
use sha2::{Digest, Sha256};
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::PgPool;

use crate::{Blob, Blobs};

/// The blobs of a [`super::PostgresStore`]'s database; see
/// [`super::PostgresStore::blobs`].
#[derive(Debug, Clone)]
pub struct PostgresBlobs {
    pub(super) pool: PgPool,
}

fn io_error(e: sqlx_core::Error) -> io::Error {
    io::Error::other(super::describe(&e))
}

#[async_trait]
impl Blobs for PostgresBlobs {
    /// Committed before it returns; a second put of the same content
    /// refreshes `written_at` only.
    async fn put(&self, content: Vec<u8>) -> io::Result<Blob> {
        let sha256 = crate::blobs::hex(&Sha256::digest(&content));
        let size = content.len() as u64;
        query(
            "INSERT INTO blobs (sha256, size, content) VALUES ($1, $2, $3)
             ON CONFLICT (sha256) DO UPDATE SET written_at = now()",
        )
        .bind(sha256.as_str())
        .bind(i64::try_from(size).map_err(io::Error::other)?)
        .bind(content)
        .execute(&self.pool)
        .await
        .map_err(io_error)?;
        Ok(Blob { sha256, size })
    }

    async fn read(&self, sha256: &str, range: Option<(u64, u64)>) -> io::Result<Vec<u8>> {
        if !is_sha256(sha256) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{sha256:?} is not a sha256"),
            ));
        }
        let to_sql = |n: u64| i64::try_from(n).map_err(io::Error::other);
        // SQL counts from 1; a range past the end yields fewer bytes, as a file read does.
        let (from, count) = match range {
            Some((start, len)) => (to_sql(start.saturating_add(1))?, Some(to_sql(len)?)),
            None => (1, None),
        };
        let row = query(
            "SELECT CASE WHEN $3::BIGINT IS NULL THEN content
                         ELSE substring(content FROM $2::BIGINT::INT FOR $3::BIGINT::INT) END
             FROM blobs WHERE sha256 = $1",
        )
        .bind(sha256)
        .bind(from)
        .bind(count)
        .fetch_optional(&self.pool)
        .await
        .map_err(io_error)?;
        match row {
            Some(row) => row.try_get(0).map_err(io_error),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no blob {sha256}"),
            )),
        }
    }

    async fn collect_orphans(
        &self,
        referenced: HashSet<String>,
        grace: Duration,
    ) -> io::Result<usize> {
        let referenced: Vec<String> = referenced.into_iter().collect();
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let removed = query(
            "DELETE FROM blobs
             WHERE written_at < now() - make_interval(secs => $2::BIGINT / 1000.0)
               AND sha256 <> ALL($1::TEXT[])",
        )
        .bind(&referenced)
        .bind(grace_ms)
        .execute(&self.pool)
        .await
        .map_err(io_error)?
        .rows_affected();
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}
