//! Remote history for fleets: push a store's history to an S3-compatible object store, and
//! pull it into another store (`rewindfs push/pull s3://bucket/prefix`).
//!
//! ```text
//! <prefix>/blobs/ab/cdef…                          one object per blob, named by its BLAKE3:
//!                                                  stored once for every workspace pushing here
//! <prefix>/history/<session>/<ms>-<export>.rwh     one object per push: the push's bundle
//!                                                  without its blobs (header, rows, manifest)
//! ```
//!
//! A push is an export (`schema/bundle.md`) split up: each blob the remote lacks is uploaded
//! (a HEAD first: one already there, from this workspace or another, is not sent again), then
//! the history object — the commit point. A push cut short leaves blobs and no history
//! object; the next push uploads only the blobs still missing. A pull lists the history
//! objects (of one session, or all), oldest first, puts each back together as a bundle with
//! the blobs it names, and imports it: the import checks every blob against its hash, and
//! adds only the checkpoints the store does not have yet.
//!
//! Credentials and endpoint come from the usual AWS environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP` for a local
//! server), read by `object_store`. object_store is async: this module runs its own
//! single-thread tokio runtime and is blocking to its callers.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path as FsPath;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::store::bundle::{self, BLOB, BundleError, FrameAt};

/// Why a push or pull failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The remote is not `s3://bucket[/prefix]`.
    #[error("remote {0:?}: expected s3://bucket[/prefix]")]
    Url(String),
    /// The object store refused or failed.
    #[error("remote {url}: {cause}")]
    Store {
        url: String,
        cause: object_store::Error,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// I/O failed (the cause in the message only).
    #[error("remote: {0}")]
    Io(std::io::Error),
    /// An object a history names is not on the remote.
    #[error(
        "remote {url}: {key} is missing (a push cut short, or an object removed since); \
         push again from the workspace it came from"
    )]
    Missing { url: String, key: String },
    /// A push stopped by the tests' fault injection.
    #[error("push interrupted after {0} blob upload(s) (REWINDFS_TEST_PUSH_FAIL_AFTER)")]
    Injected(u64),
}

impl From<std::io::Error> for RemoteError {
    fn from(e: std::io::Error) -> Self {
        RemoteError::Io(e)
    }
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushReport {
    /// Blobs uploaded, and their bytes.
    pub blobs_uploaded: u64,
    pub bytes_uploaded: u64,
    /// Blobs the remote had already (this workspace's earlier push, or another's).
    pub blobs_present: u64,
    /// The history object written.
    pub history: String,
}

/// An S3-compatible remote.
pub struct Remote {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Vec<String>,
    rt: tokio::runtime::Runtime,
}

impl Remote {
    /// The remote at `url` (`s3://bucket[/prefix]`), with credentials from the environment.
    ///
    /// # Errors
    /// A URL of another form; the client cannot be built.
    pub fn open(url: &str) -> Result<Remote, RemoteError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| RemoteError::Url(url.into()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(RemoteError::Url(url.into()));
        }
        let store = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|cause| RemoteError::Store {
                url: url.into(),
                cause,
            })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Remote {
            url: url.into(),
            store: Arc::new(store),
            prefix: prefix
                .split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
            rt,
        })
    }

    fn key<'a>(&'a self, parts: impl IntoIterator<Item = &'a str>) -> Path {
        let all: Vec<PathPart<'a>> = self
            .prefix
            .iter()
            .map(|p| PathPart::from(p.as_str()))
            .chain(parts.into_iter().map(PathPart::from))
            .collect();
        Path::from_iter(all)
    }

    fn blob_key(&self, hash: &str) -> Path {
        self.key([
            "blobs",
            &hash[..2.min(hash.len())],
            &hash[2.min(hash.len())..],
        ])
    }

    fn err(&self, cause: object_store::Error) -> RemoteError {
        RemoteError::Store {
            url: self.url.clone(),
            cause,
        }
    }

    /// Whether the object exists.
    fn exists(&self, key: &Path) -> Result<bool, RemoteError> {
        match self.rt.block_on(self.store.head(key)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    fn put(&self, key: &Path, data: Vec<u8>) -> Result<(), RemoteError> {
        self.rt
            .block_on(self.store.put(key, PutPayload::from(data)))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    fn get(&self, key: &Path) -> Result<Vec<u8>, RemoteError> {
        self.rt
            .block_on(async {
                let r = self.store.get(key).await?;
                r.bytes().await
            })
            .map(|b| b.to_vec())
            .map_err(|e| match e {
                // Said once, in words: the server's own answer (XML) adds nothing.
                object_store::Error::NotFound { .. } => RemoteError::Missing {
                    url: self.url.clone(),
                    key: key.to_string(),
                },
                e => self.err(e),
            })
    }

    /// Pushes the bundle at `bundle` (just exported): its blobs the remote lacks, then its
    /// history object under `session` (`_all` for none).
    ///
    /// # Errors
    /// A damaged bundle; the remote's errors (what was uploaded stays: the next push skips it).
    pub fn push(&self, bundle: &FsPath, session: Option<&str>) -> Result<PushReport, RemoteError> {
        let frames = bundle::scan(std::io::BufReader::new(std::fs::File::open(bundle)?))?;
        let mut file = std::fs::File::open(bundle)?;
        let fail_after = crate::faults::push_fail_after();
        let mut report = PushReport::default();
        let read = |file: &mut std::fs::File, f: &FrameAt| -> std::io::Result<Vec<u8>> {
            let mut buf = vec![0u8; f.len as usize];
            file.seek(SeekFrom::Start(f.offset))?;
            file.read_exact(&mut buf)?;
            Ok(buf)
        };
        for f in frames.iter().filter(|f| f.kind == BLOB) {
            let key = self.blob_key(&f.hash);
            if self.exists(&key)? {
                report.blobs_present += 1;
                continue;
            }
            if fail_after == Some(report.blobs_uploaded) {
                return Err(RemoteError::Injected(report.blobs_uploaded));
            }
            self.put(&key, read(&mut file, f)?)?;
            report.blobs_uploaded += 1;
            report.bytes_uploaded += f.len;
        }
        // The history object: the bundle without its blob frames.
        let mut history = Vec::new();
        file.seek(SeekFrom::Start(0))?;
        let mut head = [0u8; 12];
        file.read_exact(&mut head)?;
        history.extend_from_slice(&head);
        let mut manifest = None;
        for f in frames.iter().filter(|f| f.kind != BLOB) {
            file.seek(SeekFrom::Start(f.offset - 41))?;
            let mut buf = vec![0u8; (f.len + 41) as usize];
            file.read_exact(&mut buf)?;
            if f.kind == bundle::MANIFEST {
                manifest = serde_json::from_slice::<bundle::Manifest>(&buf[41..]).ok();
            }
            history.extend_from_slice(&buf);
        }
        let m = manifest.ok_or_else(|| {
            RemoteError::Bundle(BundleError::Refused("the bundle has no manifest".into()))
        })?;
        let name = format!("{:013}-{}.rwh", m.created_at, m.export_id);
        let key = self.key(["history", session.unwrap_or("_all"), &name]);
        self.put(&key, history)?;
        report.history = key.to_string();
        Ok(report)
    }

    /// The history objects under `session` (all sessions when `None`), oldest first.
    ///
    /// # Errors
    /// The remote's errors.
    pub fn histories(&self, session: Option<&str>) -> Result<Vec<String>, RemoteError> {
        let base = match session {
            Some(s) => self.key(["history", s]),
            None => self.key(["history"]),
        };
        let mut out = Vec::new();
        let mut dirs = vec![base];
        while let Some(d) = dirs.pop() {
            let l = self
                .rt
                .block_on(self.store.list_with_delimiter(Some(&d)))
                .map_err(|e| self.err(e))?;
            dirs.extend(l.common_prefixes);
            out.extend(l.objects.into_iter().map(|o| o.location));
        }
        // Oldest first across sessions: the file name begins with the export's time.
        out.sort_by(|a, b| {
            a.filename()
                .cmp(&b.filename())
                .then_with(|| a.as_ref().cmp(b.as_ref()))
        });
        Ok(out.into_iter().map(|p| p.to_string()).collect())
    }

    /// Puts the history object `key` back together as a bundle at `out`, with the blobs it
    /// names fetched from the remote.
    ///
    /// # Errors
    /// The remote's errors; a damaged history object.
    pub fn assemble(&self, key: &str, out: &FsPath) -> Result<(), RemoteError> {
        let history = self.get(&Path::from(key))?;
        let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
        let mut fetch_err = None;
        let res = bundle::assemble(
            &history,
            |h| {
                self.get(&self.blob_key(h)).map_err(|e| {
                    let msg = e.to_string();
                    fetch_err = Some(e);
                    std::io::Error::other(msg)
                })
            },
            &mut w,
        );
        if let Some(e) = fetch_err {
            return Err(e);
        }
        res?;
        std::io::Write::flush(&mut w)?;
        if let Some(d) = crate::faults::pause_pull() {
            std::thread::sleep(d);
        }
        Ok(())
    }
}
