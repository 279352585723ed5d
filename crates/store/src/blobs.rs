//! Artifact contents, named by their sha256: [`Blobs`], and its files
//! beside the database ([`FileBlobs`]: `<db>.artifacts/sha256/ab/abcdef...`).
//! The PostgreSQL store keeps them in its database instead
//! (`postgres/blobs.rs`), so replicas share them with nothing else to share.
//!
//! Crash discipline: [`Blobs::put`] is durable before it returns, so a
//! record written after it never points at a missing blob. A crash between
//! the two leaves an orphan blob, which [`Blobs::collect_orphans`] deletes
//! once it is older than a grace period.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use joch_core::artifact::is_sha256;
use sha2::{Digest, Sha256};

/// Where artifact contents are kept.
#[async_trait]
pub trait Blobs: Send + Sync + std::fmt::Debug {
    /// Stores `content` durably and returns its hash. When the same content
    /// is already stored, its age is reset instead, so that orphan
    /// collection racing this put cannot delete it.
    async fn put(&self, content: Vec<u8>) -> io::Result<Blob>;

    /// A blob's bytes: all of them, or `len` from `start`. `NotFound` when
    /// no such blob is stored.
    async fn read(&self, sha256: &str, range: Option<(u64, u64)>) -> io::Result<Vec<u8>>;

    /// Deletes blobs not in `referenced` whose last put is more than
    /// `grace` ago; returns how many. The grace period covers a put whose
    /// record is not yet committed.
    async fn collect_orphans(
        &self,
        referenced: HashSet<String>,
        grace: Duration,
    ) -> io::Result<usize>;
}

/// Content-addressed files under one root directory. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FileBlobs {
    root: PathBuf,
}

#[async_trait]
impl Blobs for FileBlobs {
    async fn put(&self, content: Vec<u8>) -> io::Result<Blob> {
        let files = self.clone();
        blocking(move || files.put_file(&content)).await
    }

    async fn read(&self, sha256: &str, range: Option<(u64, u64)>) -> io::Result<Vec<u8>> {
        let (files, sha256) = (self.clone(), sha256.to_owned());
        blocking(move || match range {
            Some((start, len)) => files.read_range(&sha256, start, len),
            None => files.read_all(&sha256),
        })
        .await
    }

    async fn collect_orphans(
        &self,
        referenced: HashSet<String>,
        grace: Duration,
    ) -> io::Result<usize> {
        let files = self.clone();
        blocking(move || files.collect_orphan_files(&referenced, grace)).await
    }
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)?
}

/// What [`Blobs::put`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// sha256 of the content, lowercase hex.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
}

impl FileBlobs {
    /// Blobs under `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The default place for a database's blobs: `<db>.artifacts`.
    pub fn beside(db: &Path) -> Self {
        let mut name = db.as_os_str().to_owned();
        name.push(".artifacts");
        Self::new(PathBuf::from(name))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, sha256: &str) -> io::Result<PathBuf> {
        // Only a hash ever becomes a path: no traversal through ids.
        if !is_sha256(sha256) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{sha256:?} is not a sha256"),
            ));
        }
        Ok(self.root.join("sha256").join(&sha256[..2]).join(sha256))
    }

    /// Writes a temporary file, fsyncs it, renames it into place and fsyncs
    /// the directory. Content already stored gets its modification time
    /// refreshed instead.
    fn put_file(&self, content: &[u8]) -> io::Result<Blob> {
        let sha256 = hex(&Sha256::digest(content));
        let path = self.path(&sha256)?;
        let blob = Blob {
            sha256,
            size: content.len() as u64,
        };
        if path.exists() {
            OpenOptions::new()
                .write(true)
                .open(&path)?
                .set_modified(SystemTime::now())?;
            return Ok(blob);
        }
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        let tmp_dir = self.root.join("tmp");
        fs::create_dir_all(&dir)?;
        fs::create_dir_all(&tmp_dir)?;
        let tmp = tmp_dir.join(format!("{}.{}", blob.sha256, std::process::id()));
        {
            let mut file = File::create(&tmp)?;
            file.write_all(content)?;
            file.sync_all()?;
        }
        fs::rename(&tmp, &path)?;
        // The rename is durable only once its directory is.
        File::open(&dir)?.sync_all()?;
        Ok(blob)
    }

    fn read_all(&self, sha256: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path(sha256)?)
    }

    fn read_range(&self, sha256: &str, start: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut file = File::open(self.path(sha256)?)?;
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(len).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Leftover temporary files go too.
    fn collect_orphan_files(
        &self,
        referenced: &HashSet<String>,
        grace: Duration,
    ) -> io::Result<usize> {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let old = |entry: &fs::DirEntry| {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff)
        };
        let mut removed = 0;
        for entry in read_dir_or_empty(&self.root.join("tmp"))? {
            let entry = entry?;
            if old(&entry) {
                fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
        for prefix in read_dir_or_empty(&self.root.join("sha256"))? {
            let prefix = prefix?;
            if !prefix.file_type()?.is_dir() {
                continue;
            }
            for entry in fs::read_dir(prefix.path())? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_sha256(&name) && !referenced.contains(&name) && old(&entry) {
                    fs::remove_file(entry.path())?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

fn read_dir_or_empty(dir: &Path) -> io::Result<Box<dyn Iterator<Item = io::Result<fs::DirEntry>>>> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(Box::new(entries)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Box::new(std::iter::empty())),
        Err(e) => Err(e),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What every [`Blobs`] must do; run on files here and on PostgreSQL in
/// its tests.
#[cfg(test)]
pub(crate) mod suite {
    use super::*;

    pub(crate) async fn put_read_range_and_dedupe(blobs: &dyn Blobs) {
        let put = |bytes: &[u8]| blobs.put(bytes.to_vec());
        let blob = put(b"hello world").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            blob.sha256,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert_eq!(put(b"hello world").await.ok(), Some(blob.clone()));
        assert_eq!(
            blobs.read(&blob.sha256, None).await.ok(),
            Some(b"hello world".to_vec())
        );
        assert_eq!(
            blobs.read(&blob.sha256, Some((6, 100))).await.ok(),
            Some(b"world".to_vec())
        );
        assert_eq!(
            blobs.read(&blob.sha256, Some((0, 5))).await.ok(),
            Some(b"hello".to_vec())
        );
        assert!(blobs.read("../../etc/passwd", None).await.is_err());
        let missing = "0".repeat(64);
        let error = blobs.read(&missing, None).await.map(drop);
        assert_eq!(error.map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
    }

    pub(crate) async fn orphans_go_only_after_the_grace_period(blobs: &dyn Blobs) {
        let kept = blobs
            .put(b"kept".to_vec())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let orphan = blobs
            .put(b"orphan".to_vec())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let referenced: HashSet<String> = [kept.sha256.clone()].into();
        let collect = |grace| blobs.collect_orphans(referenced.clone(), grace);
        assert_eq!(collect(Duration::from_secs(3600)).await.ok(), Some(0));
        assert!(blobs.read(&orphan.sha256, None).await.is_ok());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(collect(Duration::from_millis(1)).await.ok(), Some(1));
        assert!(blobs.read(&orphan.sha256, None).await.is_err());
        assert!(blobs.read(&kept.sha256, None).await.is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_put_read_range_and_dedupe() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        suite::put_read_range_and_dedupe(&FileBlobs::new(dir.path().join("a"))).await;
    }

    #[tokio::test]
    async fn orphan_files_go_only_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        suite::orphans_go_only_after_the_grace_period(&FileBlobs::new(dir.path())).await;
    }
}
