//! Looking at and carrying history: `show`, `ls`, `diff`, `fork`, `export`, `import`,
//! `push`, `pull`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rewindfs::cli::{
    DiffArgs, ExportArgs, ForkArgs, ImportArgs, KeyArgs, LsArgs, PullArgs, PushArgs, ShowArgs,
    SocketArgs,
};
use rewindfs::config::MountRequest;
use rewindfs::control::client::Client;
use rewindfs::control::cmd::{
    Diff, DiffReply, Export, Fork, Import, ImportReply, ListCheckpoints, Ls, Show, Status,
};
use rewindfs::daemon;
use rewindfs::rewind::Scope;
use rewindfs::store::{Kind, Origin, OriginKind};

use super::print::{print_ls, print_stat};
use super::progress::{Unit, file_size, metered, read_position, tree_bytes};
use super::{connect, print_json_or, workspace_rel, workspace_rel_glob};

/// Imports a bundle: into the daemon of `store` if one serves it, else directly into it; with
/// no store, into the daemon of the current mount (or --socket).
/// At a terminal (unless `quiet`), a meter shows how far the bundle has been read.
pub(crate) fn import(
    file: &Path,
    store: Option<&Path>,
    socket: &SocketArgs,
    quiet: bool,
) -> anyhow::Result<ImportReply> {
    let req = Import {
        path: file.to_string_lossy().into_owned(),
    };
    let through = |mut c: Client| -> anyhow::Result<ImportReply> {
        let pid = c.call(&Status {})?.pid;
        metered(
            "importing",
            Unit::Bytes,
            quiet,
            || read_position(pid, file),
            || Ok(c.call(&req)?),
        )
    };
    match store {
        Some(store) => {
            let me = std::process::id();
            let offline = metered(
                "importing",
                Unit::Bytes,
                quiet,
                || read_position(me, file),
                || daemon::import_offline(store, file, &rewindfs::config::trust()?),
            )?;
            match offline {
                Some(report) => Ok(ImportReply::of(report)),
                None => through(Client::connect(&store.join(daemon::files::SOCKET))?),
            }
        }
        None => through(connect(socket)?),
    }
}

/// `diff A [B] [PATH]`: of two words after A, the first is checkpoint B and the second a
/// path; one word is checkpoint B when it names one (a UUID, or an id the daemon lists: a
/// message id may be any string), else a path.
pub(crate) fn second_checkpoint(
    client: &mut Client,
    rest: Vec<String>,
) -> anyhow::Result<(Option<String>, Option<String>)> {
    let mut it = rest.into_iter();
    Ok(match (it.next(), it.next()) {
        (Some(b), Some(path)) => (Some(b), Some(path)),
        (Some(w), None) if is_checkpoint(client, &w)? => (Some(w), None),
        (w, _) => (None, w),
    })
}

/// Whether `word` names a checkpoint: a UUID, or the id of one the daemon lists.
pub(crate) fn is_checkpoint(client: &mut Client, word: &str) -> anyhow::Result<bool> {
    if uuid::Uuid::parse_str(word).is_ok() {
        return Ok(true);
    }
    let id = rewindfs::store::normalize_message_id(word);
    Ok(client
        .call(&ListCheckpoints { session_id: None })?
        .checkpoints
        .iter()
        .any(|c| c.uuid == id))
}

/// `rewindfs diff --fork DIR [PATH]`: from the fork's origin checkpoint (recorded in the
/// fork's store) to its tree now, asked of the origin's daemon; with the fork's directory.
pub(crate) fn diff_fork(
    dir: &Path,
    rest: Vec<String>,
    socket: &SocketArgs,
) -> anyhow::Result<(DiffReply, PathBuf)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("fork {}", dir.display()))?;
    let store = daemon::store_of_workspace(&dir)?;
    let origin = rewindfs::store::first_origin(&store)?
        .filter(|o| o.kind == OriginKind::Fork)
        .with_context(|| {
            format!(
                "{} is not a fork made by `rewindfs fork`: its store {} records no origin",
                dir.display(),
                store.display()
            )
        })?;
    if rest.len() > 1 {
        anyhow::bail!("diff --fork DIR takes at most one path");
    }
    let path = rest.into_iter().next().map(|p| {
        // A path inside the fork names the same path in the origin.
        match std::path::absolute(&p)
            .ok()
            .and_then(|a| a.strip_prefix(&dir).ok().map(Path::to_path_buf))
        {
            Some(rel) => rel.to_string_lossy().into_owned(),
            None => p,
        }
    });
    let mut client = match &socket.socket {
        Some(_) => connect(socket)?,
        None => {
            let parent = origin.store.as_deref().with_context(|| {
                format!(
                    "the fork's origin names no store; pass --socket of {}",
                    origin.workspace
                )
            })?;
            Client::connect(&Path::new(parent).join(daemon::files::SOCKET)).with_context(|| {
                format!(
                    "the fork's origin {} is not mounted (its daemon answers the diff)",
                    origin.workspace
                )
            })?
        }
    };
    let r = client.call(&Diff {
        user_message_id: origin.uuid,
        to_message_id: None,
        fork_dir: Some(dir.to_string_lossy().into_owned()),
        path,
        scope: Scope::All,
        session_id: None,
    })?;
    Ok((r, dir))
}

/// `rewindfs fork`: the daemon writes the tree; the fork's store is begun with its origin;
/// with `--mount`, the fork is mounted.
pub(crate) fn fork(a: ForkArgs) -> anyhow::Result<()> {
    let ForkArgs {
        uuid,
        dir,
        mount,
        store,
        trust_imported,
        json,
        socket,
    } = a;
    let (uuid, dir, socket) = (uuid.as_str(), dir.as_path(), &socket);
    let abs = std::path::absolute(dir)?;
    let mut client = connect(socket)?;
    let r = metered(
        "forking",
        Unit::Bytes,
        json,
        || tree_bytes(&abs),
        || {
            client.call(&Fork {
                user_message_id: uuid.to_string(),
                dir: abs.to_string_lossy().into_owned(),
                trust_imported,
            })
        },
    )?;
    let cfg = MountRequest {
        store,
        ..MountRequest::new(r.dir.clone())
    }
    .check()?;
    let origin = Origin {
        kind: OriginKind::Fork,
        workspace: r.workspace.to_string_lossy().into_owned(),
        store: Some(r.store.to_string_lossy().into_owned()),
        uuid: r.checkpoint.clone(),
        session_id: r.session_id.clone(),
        at: rewindfs::store::origin_now(),
    };
    cfg.create_store()?;
    daemon::begin_fork_store(&cfg.store, &origin)?;
    if mount {
        daemon::spawn_detached(&cfg)?;
    }
    print_json_or(json, &r, |r| {
        println!(
            "forked {} at {} into {}: {} file(s), {} dir(s), {} symlink(s), {} bytes ({} file(s), {} bytes from the store){}",
            r.workspace.display(),
            r.checkpoint,
            r.dir.display(),
            r.files,
            r.dirs,
            r.symlinks,
            r.bytes,
            r.files_from_store,
            r.bytes_from_store,
            if mount { "; mounted" } else { "" }
        );
        for s in &r.skipped {
            println!("  skipped {s}");
        }
        super::print::print_withheld(&r.withheld, None);
    })
}

/// Bytes `show` asks the daemon for at once: a file up to this size is read in one request
/// (one consistent look); a larger one in pieces.
const SHOW_CHUNK: u64 = 32 << 20;

/// `rewindfs show`: the file's bytes, raw, to stdout (`--json`: what the path was).
pub(crate) fn show(a: ShowArgs) -> anyhow::Result<()> {
    let ShowArgs {
        uuid,
        path,
        json,
        socket,
    } = a;
    let (uuid, path, socket) = (uuid.as_str(), path.as_path(), &socket);
    use std::io::Write;
    let mut client = connect(socket)?;
    let rel = workspace_rel(&mut client, path)?;
    let ask = |client: &mut Client, content: bool, offset: u64| {
        client.call(&Show {
            user_message_id: uuid.to_string(),
            path: rel.clone(),
            content,
            offset,
            length: content.then_some(SHOW_CHUNK),
        })
    };
    if json {
        let r = ask(&mut client, false, 0)?;
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let r = ask(&mut client, true, offset)?;
        match r.kind {
            Kind::File => {}
            Kind::Symlink => {
                writeln!(out, "{}", r.target.unwrap_or_default())?;
                return Ok(());
            }
            Kind::Dir => anyhow::bail!(
                "{}: a directory when checkpoint {uuid} began; `rewindfs ls {uuid} {}` lists it",
                r.path,
                path.display()
            ),
            k => anyhow::bail!(
                "{}: a special file ({}) when checkpoint {uuid} began",
                r.path,
                k.as_str()
            ),
        }
        let got = r.content.unwrap_or_default();
        out.write_all(&got)?;
        offset += got.len() as u64;
        if got.is_empty() || offset >= r.size {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

/// `rewindfs diff A [B] [PATH]` and `rewindfs diff --fork DIR [PATH]`: unified, or `--stat`.
pub(crate) fn diff(a: DiffArgs) -> anyhow::Result<()> {
    let DiffArgs {
        uuid,
        rest,
        stat,
        fork,
        scope,
        session,
        socket,
    } = a;
    let (fork, socket) = (fork.as_deref(), &socket);
    // The reply's paths are absolute: under the fork for --fork, else the workspace.
    let (r, root) = match fork {
        Some(dir) => diff_fork(dir, rest, socket)?,
        None => {
            let uuid = uuid.context("a checkpoint to compare with")?;
            let mut client = connect(socket)?;
            let (to, path) = second_checkpoint(&mut client, rest)?;
            let path = match path {
                Some(p) => Some(workspace_rel_glob(&mut client, &p)?),
                None => None,
            };
            let r = client.call(&Diff {
                user_message_id: uuid,
                to_message_id: to,
                fork_dir: None,
                path,
                scope,
                session_id: session,
            })?;
            (r, client.call(&Status {})?.workspace)
        }
    };
    if stat {
        print_stat(&r, &root);
    } else {
        print!("{}", r.diff);
    }
    Ok(())
}

/// The key to sign with: `--sign FILE`; `--sign` alone, the trust file's `sign-with` key or
/// the default one; no `--sign`, the trust file's `sign-with` key if it names one.
fn signing_key(
    sign: Option<PathBuf>,
) -> anyhow::Result<Option<rewindfs::store::bundle::SigningKey>> {
    let trust = rewindfs::config::trust()?;
    let path = match sign {
        Some(p) if !p.as_os_str().is_empty() => Some(p),
        Some(_) => Some(
            trust
                .sign_with
                .or_else(rewindfs::config::default_signing_key)
                .context("no signing key: pass --sign KEYFILE")?,
        ),
        None => trust.sign_with,
    };
    path.map(|p| {
        rewindfs::store::bundle::load_key(&p)
            .with_context(|| format!("the signing key {}", p.display()))
    })
    .transpose()
}

/// `rewindfs key generate|show`.
pub(crate) fn key(a: KeyArgs) -> anyhow::Result<()> {
    let KeyArgs { action } = a;
    use rewindfs::cli::KeyAction;
    let default =
        || rewindfs::config::default_signing_key().context("no home directory: name the key file");
    match action {
        KeyAction::Generate { file } => {
            let file = match file {
                Some(f) => f,
                None => default()?,
            };
            let line = rewindfs::store::bundle::generate_key(&file)
                .with_context(|| format!("making the signing key {}", file.display()))?;
            println!("{line}");
            eprintln!(
                "made {} (keep it private); give the line above to whoever pulls your history, for \
                 their trust file ({})",
                file.display(),
                rewindfs::config::trust_file().map_or_else(
                    || "~/.config/rewindfs/trust".into(),
                    |t| t.display().to_string()
                )
            );
        }
        KeyAction::Show { file } => {
            let file = match file {
                Some(f) => f,
                None => default()?,
            };
            let k = rewindfs::store::bundle::load_key(&file)?;
            println!("{}", rewindfs::store::bundle::public_line(&k));
        }
    }
    Ok(())
}

/// `rewindfs export`: the daemon writes the bundle; the key's holder signs it here.
pub(crate) fn export(a: ExportArgs) -> anyhow::Result<()> {
    let ExportArgs {
        session,
        since,
        file,
        sign,
        json,
        socket,
    } = a;
    let (file, socket) = (file.as_path(), &socket);
    let key = signing_key(sign.sign)?;
    let abs = std::path::absolute(file)?;
    let mut client = connect(socket)?;
    let r = metered(
        "exporting",
        Unit::Bytes,
        json,
        || file_size(&abs),
        || {
            client.call(&Export {
                path: abs.to_string_lossy().into_owned(),
                session_id: session,
                since,
            })
        },
    )?;
    if let Some(k) = &key {
        rewindfs::store::bundle::sign_file(&r.path, k)?;
    }
    print_json_or(json, &r, |r| {
        println!(
            "exported {} checkpoint(s), {} blob(s) ({} bytes), {} row(s) to {} ({} bytes)",
            r.checkpoints.len(),
            r.blobs,
            r.blob_bytes,
            r.rows,
            r.path.display(),
            r.bytes
        )
    })
}

/// `rewindfs import`.
pub(crate) fn import_cmd(a: ImportArgs) -> anyhow::Result<()> {
    let ImportArgs {
        file,
        store,
        json,
        socket,
    } = a;
    let (file, store, socket) = (file.as_path(), store.as_deref(), &socket);
    let r = import(&std::path::absolute(file)?, store, socket, json)?;
    print_json_or(json, &r, |r| {
        if r.already_imported {
            println!(
                "already imported: all {} checkpoint(s) of the bundle are here",
                r.checkpoint_ids.len()
            );
        } else {
            println!(
                "imported {} checkpoint(s) from {} ({} row(s), {} blob(s), {} bytes)",
                r.checkpoints, r.workspace, r.rows, r.blobs, r.blob_bytes
            );
        }
    })
}

/// A private (0700) temporary directory for a bundle on its way to or from a remote, which the
/// daemon at `socket` can write and read: when root runs the command for another user's daemon,
/// it is given to that user. Never a predictable name in a directory others can write.
fn private_tmp(what: &str, socket: &Path) -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(&format!("rewindfs-{what}-"))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .context("making a private temporary directory")?;
    if rustix::process::geteuid().is_root() {
        if let Ok(md) = std::fs::metadata(socket) {
            use std::os::unix::fs::MetadataExt;
            if md.uid() != 0 {
                std::os::unix::fs::chown(dir.path(), Some(md.uid()), Some(md.gid()))?;
            }
        }
    }
    Ok(dir)
}

/// `rewindfs push`: an export to a temporary bundle, then its upload.
pub(crate) fn push(a: PushArgs) -> anyhow::Result<()> {
    let PushArgs {
        remote,
        session,
        since,
        sign,
        json,
        socket,
    } = a;
    let (remote, socket) = (remote.as_str(), &socket);
    let key = signing_key(sign.sign)?;
    let mut client = connect(socket)?;
    let tmpdir = private_tmp("push", client.path())?;
    let tmp = tmpdir.path().join("history.rwb");
    let e = metered(
        "exporting",
        Unit::Bytes,
        json,
        || file_size(&tmp),
        || {
            client.call(&Export {
                path: tmp.to_string_lossy().into_owned(),
                session_id: session.clone(),
                since,
            })
        },
    )?;
    if let Some(k) = &key {
        rewindfs::store::bundle::sign_file(&tmp, k)?;
    }
    let rm = rewindfs::client::remote::Remote::open(remote)?;
    let r = metered(
        &format!("uploading to {remote}"),
        Unit::Time,
        json,
        || None,
        || rm.push(&tmp, session.as_deref()),
    )?;
    drop(tmpdir);
    print_json_or(json, &r, |r| {
        println!(
            "pushed {} checkpoint(s) to {remote}: {} blob(s) uploaded ({} bytes), {} already there; {}",
            e.checkpoints.len(),
            r.blobs_uploaded,
            r.bytes_uploaded,
            r.blobs_present,
            r.history
        )
    })
}

/// `rewindfs pull`: each pushed history assembled into a bundle in a private directory, then
/// imported.
pub(crate) fn pull(a: PullArgs) -> anyhow::Result<()> {
    let PullArgs {
        remote,
        session,
        store,
        json,
        socket,
    } = a;
    let (remote, session, store, socket) = (
        remote.as_str(),
        session.as_deref(),
        store.as_deref(),
        &socket,
    );
    let rm = rewindfs::client::remote::Remote::open(remote)?;
    let daemon_socket = match store {
        Some(s) => s.join(daemon::files::SOCKET),
        None => connect(socket)?.path().to_path_buf(),
    };
    let tmpdir = private_tmp("pull", &daemon_socket)?;
    // Each history on its own: one refused (unsigned, tampered, another user's) neither stops
    // the others nor is applied; the pull fails at the end, naming it.
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for key in rm.histories(session)? {
        let tmp = tmpdir.path().join("history.rwb");
        let r = metered(
            &format!("downloading {key}"),
            Unit::Bytes,
            json,
            || file_size(&tmp),
            || rm.assemble(&key, &tmp),
        )
        .map_err(anyhow::Error::from)
        .and_then(|()| import(&tmp, store, socket, json));
        let _ = std::fs::remove_file(&tmp);
        match r {
            Ok(r) => out.push((key, r)),
            Err(e) => refused.push((key, format!("{e:#}"))),
        }
    }
    drop(tmpdir);
    if json {
        let mut v: Vec<_> = out
            .iter()
            .map(|(k, r)| serde_json::json!({"history": k, "import": r}))
            .collect();
        v.extend(
            refused
                .iter()
                .map(|(k, e)| serde_json::json!({"history": k, "refused": e})),
        );
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (k, r) in &out {
            let by = r
                .signed_by
                .as_deref()
                .map_or(String::new(), |s| format!(", signed by {s}"));
            if r.already_imported {
                println!("{k}: already here{by}");
            } else {
                println!(
                    "{k}: imported {} checkpoint(s) from {}{by}",
                    r.checkpoints, r.workspace
                );
            }
        }
        for (k, e) in &refused {
            println!("{k}: refused: {e}");
        }
        println!("{} push(es) in {remote}", out.len() + refused.len());
    }
    if !refused.is_empty() {
        anyhow::bail!(
            "pulling {remote}: {} of {} histories refused (above); nothing of them was imported",
            refused.len(),
            out.len() + refused.len()
        );
    }
    Ok(())
}

/// `rewindfs ls UUID [DIR]`.
pub(crate) fn ls(a: LsArgs) -> anyhow::Result<()> {
    let LsArgs {
        uuid,
        dir,
        json,
        socket,
    } = a;
    let (dir, socket) = (dir.as_deref(), &socket);
    let mut client = connect(socket)?;
    let path = match dir {
        Some(d) => Some(workspace_rel(&mut client, d)?),
        None => None,
    };
    let r = client.call(&Ls {
        user_message_id: uuid,
        path,
    })?;
    print_json_or(json, &r, print_ls)
}
