//! Signed history: who made a bundle, for a team that shares history through a place others
//! can write (a shared S3 prefix). A bundle's hashes are unkeyed — anyone who can write the
//! prefix can make a sound bundle of their own — so a team signs what it pushes (Ed25519) and
//! has `pull` and `import` refuse history no trusted key signed.
//!
//! ```text
//! frame 'S' (after the manifest):  {"key": base64(public key), "sig": base64(signature)}
//! signed message:  "rewindfs-history-v1\0" ‖ BLAKE3(header ‖ each rows and manifest frame's
//!                  41-byte header, in order)
//! ```
//! Each frame header carries its payload's BLAKE3 (checked as it is read), and the rows name
//! every blob by its BLAKE3 (checked as it is stored), so the signature covers everything the
//! bundle holds. Blob frames are left out of the message, so a pushed history object (the bundle
//! without its blobs, `remote.rs`) carries the same signature as the bundle.
//!
//! The policy and the trusted keys live in a file outside the store (`trust`, see
//! `Trust::load`), one line for the policy:
//! ```text
//! require-signed yes                       # pull and import refuse unsigned history
//! sign-with /home/me/.config/rewindfs/signing.key   # push and export sign with this key
//! ed25519 AAAA… alice@laptop                # a trusted public key, one per line
//! ```

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::{BundleError, MANIFEST, ROWS, scan};

/// The signature frame's kind.
pub const SIGNATURE: u8 = b'S';
/// The longest signature frame a reader takes.
pub(super) const MAX_SIGNATURE: u64 = 4096;
/// What the signed message begins with (a signature over a bundle means nothing elsewhere).
const DOMAIN: &[u8] = b"rewindfs-history-v1\0";

/// The signature frame's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SignatureFrame {
    key: String,
    sig: String,
}

/// Which signed history this machine accepts.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// History no trusted key signed is refused.
    pub require: bool,
    /// The trusted public keys, with their comments.
    pub keys: Vec<(VerifyingKey, String)>,
    /// The key push and export sign with.
    pub sign_with: Option<PathBuf>,
    /// Where this was read from (for messages).
    pub file: Option<PathBuf>,
}

impl Trust {
    /// Reads the trust file at `file`; a missing file trusts nothing and requires nothing.
    ///
    /// # Errors
    /// A line that is not understood (named with its number), a key that does not decode.
    pub fn load(file: &Path) -> Result<Trust, String> {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Trust {
                    file: Some(file.to_path_buf()),
                    ..Trust::default()
                });
            }
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let mut t = Trust {
            file: Some(file.to_path_buf()),
            ..Trust::default()
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let bad = |why: &str| format!("{}, line {}: {why}: {line:?}", file.display(), n + 1);
            let mut words = line.split_whitespace();
            match words.next() {
                None => {}
                Some("require-signed") => {
                    t.require = match words.next() {
                        Some("yes" | "true") => true,
                        Some("no" | "false") => false,
                        _ => return Err(bad("expected `require-signed yes` or `no`")),
                    }
                }
                Some("sign-with") => {
                    let p = words
                        .next()
                        .ok_or_else(|| bad("expected `sign-with KEYFILE`"))?;
                    t.sign_with = Some(PathBuf::from(p));
                }
                Some("ed25519") => {
                    let k = words.next().ok_or_else(|| bad("expected `ed25519 KEY`"))?;
                    let key = decode_public(k).map_err(|e| bad(&e))?;
                    let comment = words.collect::<Vec<_>>().join(" ");
                    t.keys.push((key, comment));
                }
                Some(_) => {
                    return Err(bad(
                        "expected `require-signed yes|no`, `sign-with KEYFILE` or `ed25519 KEY [comment]`",
                    ));
                }
            }
        }
        Ok(t)
    }

    fn name(&self) -> String {
        self.file
            .as_ref()
            .map_or_else(|| "the trust file".into(), |f| f.display().to_string())
    }

    /// Judges a bundle whose rows and manifest hash to `digest`, signed by `frame` (`None`:
    /// unsigned): the comment of the key that signed it (`Ok(None)`: unsigned, which the policy
    /// allows).
    ///
    /// # Errors
    /// `Refused`, saying why and what to do: a signature that does not verify (always), an
    /// unsigned bundle or a key not trusted here (when signatures are required).
    pub(super) fn judge(
        &self,
        digest: &[u8; 32],
        frame: Option<&[u8]>,
    ) -> Result<Option<String>, BundleError> {
        let Some(payload) = frame else {
            if self.require {
                return Err(BundleError::Refused(format!(
                    "the history is not signed, and {} requires history signed by a trusted key \
                     (`require-signed yes`): ask whoever pushed it to sign it (`rewindfs push \
                     --sign`), or import it anyway by turning that off",
                    self.name()
                )));
            }
            return Ok(None);
        };
        let f: SignatureFrame = serde_json::from_slice(payload)
            .map_err(|e| BundleError::Refused(format!("the bundle's signature frame: {e}")))?;
        let key = decode_public(&f.key).map_err(BundleError::Refused)?;
        let sig = crate::store::base64::decode(&f.sig)
            .ok()
            .and_then(|b| ed25519_dalek::Signature::from_slice(&b).ok())
            .ok_or_else(|| BundleError::Refused("the bundle's signature is not one".into()))?;
        if key.verify(&message(digest), &sig).is_err() {
            return Err(BundleError::Refused(format!(
                "the bundle's signature by key {} does not match what it holds: it was altered \
                 after it was signed; nothing was imported",
                f.key
            )));
        }
        match self.keys.iter().find(|(k, _)| *k == key) {
            Some((_, comment)) => Ok(Some(if comment.is_empty() {
                f.key
            } else {
                comment.clone()
            })),
            None if self.require => Err(BundleError::Refused(format!(
                "the history is signed by key {}, which {} does not trust: if you trust it, add \
                 the line `ed25519 {} <who>` there",
                f.key,
                self.name(),
                f.key
            ))),
            None => Ok(Some(f.key)),
        }
    }
}

/// The message a signature is over.
fn message(digest: &[u8; 32]) -> Vec<u8> {
    let mut m = DOMAIN.to_vec();
    m.extend_from_slice(digest);
    m
}

fn decode_public(s: &str) -> Result<VerifyingKey, String> {
    let b = crate::store::base64::decode(s).map_err(|e| format!("not a key: {e}"))?;
    let raw: [u8; 32] = b
        .as_slice()
        .try_into()
        .map_err(|_| "not an Ed25519 public key (32 bytes)".to_string())?;
    VerifyingKey::from_bytes(&raw).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

/// A key's public half as a trust file line: `ed25519 BASE64`.
pub fn public_line(key: &SigningKey) -> String {
    format!(
        "ed25519 {}",
        crate::store::base64::encode(key.verifying_key().as_bytes())
    )
}

/// Makes a new signing key at `path` (private, 0600; refused if something is there): its
/// public line.
///
/// # Errors
/// The file exists or cannot be written; no randomness.
pub fn generate_key(path: &Path) -> io::Result<String> {
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
    let key = SigningKey::from_bytes(&seed);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = crate::store::private::open_file(
        path,
        std::fs::OpenOptions::new().write(true).create_new(true),
    )?;
    writeln!(f, "{}", crate::store::base64::encode(&seed))?;
    f.sync_all()?;
    Ok(public_line(&key))
}

/// Reads the signing key at `path`.
///
/// # Errors
/// It cannot be read, or is not a key this build wrote; it can be read by others.
pub fn load_key(path: &Path) -> io::Result<SigningKey> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| ctx(path, e))?;
    if md.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: a signing key others can read (mode {:o}): `chmod 600` it, and make a new one \
                 if others may have read it",
                path.display(),
                md.mode() & 0o777
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ctx(path, e))?;
    let seed: [u8; 32] = crate::store::base64::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a rewindfs signing key", path.display()),
            )
        })?;
    Ok(SigningKey::from_bytes(&seed))
}

fn ctx(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The digest a bundle's signature is over, made as its frames are read (`read.rs`).
pub(super) struct Digest(blake3::Hasher);

impl Digest {
    pub(super) fn new(header: &[u8]) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(header);
        Digest(h)
    }

    /// Takes in a rows or manifest frame's header (its payload's hash checked already).
    pub(super) fn frame(&mut self, header: &[u8; 41]) {
        self.0.update(header);
    }

    pub(super) fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

/// Signs the bundle (or history object) at `path` with `key`: appends its signature frame.
/// A bundle signed already is refused.
///
/// # Errors
/// A damaged bundle, or one signed already; I/O errors.
pub fn sign_file(path: &Path, key: &SigningKey) -> Result<(), BundleError> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| ctx(path, e))?;
    let frames = scan(io::BufReader::new(&mut f))?;
    if frames.iter().any(|x| x.kind == SIGNATURE) {
        return Err(BundleError::Refused(format!(
            "{} is signed already",
            path.display()
        )));
    }
    if frames.last().map(|x| x.kind) != Some(MANIFEST) {
        return Err(BundleError::Refused(format!(
            "{}: no manifest at its end",
            path.display()
        )));
    }
    let mut head = [0u8; 12];
    f.seek(SeekFrom::Start(0))?;
    f.read_exact(&mut head)?;
    let mut d = Digest::new(&head);
    for x in frames
        .iter()
        .filter(|x| x.kind == ROWS || x.kind == MANIFEST)
    {
        d.frame(&frame_header(x.kind, x.len, &x.hash));
    }
    let sig = key.sign(&message(&d.finish()));
    let payload = serde_json::to_vec(&SignatureFrame {
        key: crate::store::base64::encode(key.verifying_key().as_bytes()),
        sig: crate::store::base64::encode(&sig.to_bytes()),
    })
    .map_err(io::Error::other)?;
    let hash = *blake3::hash(&payload).as_bytes();
    f.seek(SeekFrom::End(0))?;
    f.write_all(&[SIGNATURE])?;
    f.write_all(&(payload.len() as u64).to_le_bytes())?;
    f.write_all(&hash)?;
    f.write_all(&payload)?;
    f.sync_all()?;
    Ok(())
}

/// A frame's 41-byte header: kind, length, the payload's hash (hex as [`scan`] gives it).
fn frame_header(kind: u8, len: u64, hash: &str) -> [u8; 41] {
    let mut h = [0u8; 41];
    h[0] = kind;
    h[1..9].copy_from_slice(&len.to_le_bytes());
    if let Some(raw) = super::decode_hash(hash) {
        h[9..].copy_from_slice(&raw);
    }
    h
}
