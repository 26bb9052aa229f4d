//! Replies for people: one line per fact, paths relative to the workspace.

use std::path::Path;

use rewindfs::control::cmd::{
    CheckpointList, DiffReply, GcReply, LogReply, LsReply, Passthrough, RewindReply, StatusReply,
    unprotected_warning,
};
use rewindfs::rewind::{AttrChange, Withheld};
use rewindfs::store::{Kind, OriginKind};
use rewindfs::timeline::Timeline;

pub(crate) fn print_checkpoints(r: &CheckpointList) {
    println!(
        "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  {:<12}  PROMPT",
        "UUID", "KIND", "BEGAN", "PATHS", "BYTES", "SESSION"
    );
    // Each session's turns, numbered from 1 as `rewindfs rewind --turn N` takes them.
    let timeline = Timeline::new(r.checkpoints.clone(), &[]);
    for row in &timeline.rows {
        let c = &row.info;
        let turn = row.turn.map(|n| format!("#{n} "));
        let session = c.session_id.as_deref().unwrap_or("-");
        // A session id is a uuid: its first block tells sessions apart.
        let session = session.get(..12).unwrap_or(session);
        let prompt = match (&c.prompt, c.bound, &c.rewind) {
            (_, _, Some(r)) => rewindfs::timeline::rewind_label(r),
            (Some(p), true, _) => p.clone(),
            (Some(p), false, _) => {
                format!("{p}  (message uuid not known yet; this is the prompt_id)")
            }
            (None, _, _) => String::new(),
        };
        let prompt = format!("{}{prompt}", turn.unwrap_or_default());
        println!(
            "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  {:<12}  {}",
            c.uuid,
            c.kind.as_str(),
            c.began_at,
            c.paths_changed,
            c.bytes_captured,
            session,
            prompt
        );
        if let Some(o) = &c.origin {
            let how = match o.kind {
                OriginKind::Fork => "forked from",
                OriginKind::Import => "imported from",
            };
            println!("  {how} {} at checkpoint {}", o.workspace, o.checkpoint);
        }
    }
}

/// `list --turns`: each session's checkpoints in the timeline's words, with their ids.
pub(crate) fn print_turns(t: &Timeline, only: Option<&str>) {
    let mut any = false;
    for session in t.sessions() {
        if only.is_some() && session != only {
            continue;
        }
        let rows: Vec<_> = t
            .rows
            .iter()
            .filter(|r| r.info.session_id.as_deref() == session)
            .collect();
        match session {
            Some(s) => println!("Session {s}:"),
            None => println!("No session (mounts, rewinds, checkpoints begun by hand):"),
        }
        for r in rows {
            any = true;
            println!("  {}  {}  id {}", r.label(), r.who(), r.info.uuid);
        }
    }
    if !any {
        println!(
            "No checkpoints yet: each prompt begins one (`rewindfs setup <agent>` wires the hooks)."
        );
    }
}

pub(crate) fn print_ls(r: &LsReply) {
    for e in &r.entries {
        let target = e
            .target
            .as_deref()
            .map(|t| format!(" -> {t}"))
            .unwrap_or_default();
        let slash = if e.kind == Kind::Dir { "/" } else { "" };
        // `*`: changed since the checkpoint (what a rewind to it would restore).
        let mark = if e.unchanged { ' ' } else { '*' };
        println!(
            "{mark} {:<7} {:04o} {:>10}  {}{slash}{target}",
            e.kind.as_str(),
            e.mode,
            e.size,
            e.name
        );
    }
}

/// `--stat`: lines added and removed per file (relative to `root`), and the totals.
pub(crate) fn print_stat(r: &DiffReply, root: &Path) {
    let names: Vec<_> = r.stats.iter().map(|s| shown(&s.path, root)).collect();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    let (mut ins, mut del) = (0, 0);
    for (s, name) in r.stats.iter().zip(&names) {
        ins += s.insertions;
        del += s.deletions;
        if s.binary {
            println!(" {name:<width$} | Bin");
        } else {
            let bar = "+".repeat(s.insertions.min(40) as usize)
                + &"-".repeat(s.deletions.min(40) as usize);
            println!(" {name:<width$} | {:>5} {bar}", s.insertions + s.deletions);
        }
    }
    println!(
        " {} file(s) changed, {ins} insertion(s)(+), {del} deletion(s)(-)",
        r.stats.len()
    );
}

pub(crate) fn print_log(r: &LogReply) {
    for e in &r.entries {
        let p2 = match (&e.path2, &e.via) {
            (Some(p), _) => format!(" -> {p}"),
            (None, Some(t)) => format!(" (via {t})"),
            (None, None) => String::new(),
        };
        println!(
            "{}  {:<8} {:<9} {}{}  [{} pid {} {}]  {}",
            e.time,
            e.actor.as_str(),
            e.op.as_str(),
            e.path,
            p2,
            e.process,
            e.pid,
            e.tool_use_id.as_deref().unwrap_or(""),
            e.checkpoint.as_deref().unwrap_or("")
        );
    }
}

pub(crate) fn print_status(r: &StatusReply) {
    let pids: Vec<String> = r.agent_pids.iter().map(u32::to_string).collect();
    let rows = [
        ("workspace", r.workspace.display().to_string()),
        ("store", r.store.display().to_string()),
        ("pid", r.pid.to_string()),
        ("sessionId", r.session_id.clone().unwrap_or_default()),
        ("currentCheckpoint", r.current_checkpoint.clone()),
        ("checkpoints", r.checkpoints.to_string()),
        ("checkpointsDropped", r.checkpoints_dropped.to_string()),
        ("captures", r.captures.to_string()),
        ("bytesCaptured", r.bytes_captured.to_string()),
        ("agentPids", format!("[{}]", pids.join(","))),
        ("storeBytes", r.store_bytes.to_string()),
        (
            "storeFreeBytes",
            r.store_free_bytes.map_or("?".into(), |b| b.to_string()),
        ),
        (
            "passthrough",
            match r.passthrough {
                Passthrough::Off => "off".into(),
                Passthrough::On => "on".into(),
                Passthrough::Unavailable => {
                    "unavailable: asked for, but the kernel or privileges refuse it (see the \
                     daemon's log); reads go through the daemon"
                        .to_string()
                }
            },
        ),
    ];
    for (k, v) in rows {
        println!("{k:<18} {v}");
    }
    if r.store_full {
        println!(
            "storeFull          yes: {} change(s) were refused (ENOSPC) because their pre-image could \
             not be saved, the last at {}; free space where the store is, or run `rewindfs gc`",
            r.writes_refused_store_full,
            r.last_refused_at.as_deref().unwrap_or("?")
        );
    } else if r.writes_refused_store_full > 0 {
        println!(
            "writesRefused      {} (store full, the last at {})",
            r.writes_refused_store_full,
            r.last_refused_at.as_deref().unwrap_or("?")
        );
    }
    for u in &r.unfinished_rewinds {
        println!(
            "unfinishedRewind   {}: {} (`rewindfs undo` puts back what of it was applied; the \
             next mount tries again)",
            u.id, u.error
        );
    }
    for s in &r.sessions {
        let pids: Vec<String> = s.agent_pids.iter().map(u32::to_string).collect();
        println!(
            "session {}  current {}  agents [{}]{}",
            s.session_id,
            s.current_checkpoint,
            pids.join(","),
            if s.live { "" } else { "  (not live)" }
        );
    }
    if !r.unprotected_processes.is_empty() {
        println!(
            "unprotected: {}",
            unprotected_warning(&r.workspace, &r.unprotected_processes)
        );
    }
}

pub(crate) fn print_gc(r: &GcReply) {
    let b = rewindfs::units::human_bytes;
    let size = if r.bytes_freed > 0 {
        format!(
            "the store went from {} to {}",
            b(r.bytes_before),
            b(r.bytes_after)
        )
    } else {
        format!("the store holds {}", b(r.bytes_after))
    };
    println!(
        "dropped {} checkpoint(s), {} capture(s), {} blob(s); freed {}: {size}",
        r.checkpoints_dropped,
        r.captures_deleted,
        r.blobs_deleted,
        b(r.bytes_freed),
    );
    if r.over_budget {
        println!(
            "still over the budget of {}: what is left is the current checkpoint and what the live \
             session needs to rewind to its first message, which gc never drops (a larger \
             --max-store-bytes, or a new session, lets it go)",
            b(r.max_store_bytes.unwrap_or(0))
        );
    }
}

/// An undo's or redo's reply, for people: which rewind, what changed (or would), what others
/// changed since, and what undo and redo can do next.
pub(crate) fn print_stack(r: &RewindReply, dry_run: bool, ws: &Path, list: Listing) {
    if let Some(e) = &r.error {
        eprintln!("rewindfs: {e}");
        if r.undone.is_none() && r.redone.is_none() {
            return; // nothing to undo or redo: the reason says it all
        }
    }
    let done = !dry_run && r.can_rewind;
    let (verb, rewind) = match (&r.undone, &r.redone, done) {
        (Some(u), _, true) => ("undid", u),
        (Some(u), _, false) => ("would undo", u),
        (_, Some(u), true) => ("redid", u),
        (_, Some(u), false) => ("would redo", u),
        (None, None, _) => return,
    };
    let what = match (&r.rewound_to, r.scope) {
        (Some(to), Some(scope)) => format!(" (the rewind to {to}, scope {})", scope.as_str()),
        _ => String::new(),
    };
    println!("{verb} rewind {rewind}{what}");
    let changes = if done { "changed" } else { "would change" };
    print_changes(
        &r.files_changed,
        r.insertions,
        r.deletions,
        changes,
        ws,
        list,
    );
    if !r.conflicts.is_empty() {
        let how = if done { "overwritten" } else { "in the way" };
        println!("changed since by someone other than rewindfs ({how}):");
        for f in &r.conflicts {
            let rel = shown(f, ws);
            let who = r.conflicts_by.get(rel.as_ref()).map(|w| w.join(", "));
            println!(
                "  {rel}{}",
                who.map(|w| format!(" ({w})")).unwrap_or_default()
            );
        }
    }
    print_meanwhile(&r.changed_meanwhile, &r.partially_restored, ws);
    if done {
        println!(
            "undo can go back {} more rewind(s), redo re-apply {}",
            r.undoable.unwrap_or(0),
            r.redoable.unwrap_or(0)
        );
    }
}

/// What a rewind, undo or redo left to another process that changed a path while it ran: never
/// overwritten, so the person must know which paths did not come back (or came back in part).
fn print_meanwhile(meanwhile: &[String], partial: &[String], ws: &Path) {
    let whole: Vec<&String> = meanwhile.iter().filter(|p| !partial.contains(p)).collect();
    if !whole.is_empty() {
        println!(
            "left {} path(s) as another process changed them while this ran (not overwritten; \
             run it again to include them):",
            whole.len()
        );
        for f in whole {
            println!("  {}", shown(f, ws));
        }
    }
    if !partial.is_empty() {
        println!(
            "partly restored {} path(s): another process changed them between two steps of \
             this one, so they hold some of each; check them (`rewindfs undo --dry-run` shows \
             what an undo would give back):",
            partial.len()
        );
        for f in partial {
            println!("  {}", shown(f, ws));
        }
    }
}

/// An absolute path from a reply (its wire form), as people read it: relative to the
/// workspace, a name that is not UTF-8 still quoted as on the wire.
pub(crate) fn shown<'a>(p: &'a str, ws: &Path) -> std::borrow::Cow<'a, str> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = rewindfs::wire_path::decode(p);
    match Path::new(std::ffi::OsStr::from_bytes(&bytes)).strip_prefix(ws) {
        Ok(rel) => rewindfs::wire_path::encode(rel.as_os_str().as_bytes()).into(),
        Err(_) => p.into(),
    }
}

pub(crate) fn print_rewind(r: &RewindReply, dry_run: bool, ws: &Path, list: Listing) {
    if let Some(e) = &r.error {
        eprintln!("rewindfs: cannot rewind: {e}");
        if r.files_changed.is_empty() && r.conflicts.is_empty() {
            return; // nothing to show but the reason (e.g. a checkpoint gc removed)
        }
    }
    // A rewind refused changed nothing: what it lists is what it would have changed.
    let verb = if dry_run || !r.can_rewind {
        "would change"
    } else {
        "changed"
    };
    print_changes(&r.files_changed, r.insertions, r.deletions, verb, ws, list);
    if !r.conflicts.is_empty() {
        println!("conflicts (also changed by other actors or sessions):");
        for f in &r.conflicts {
            let rel = shown(f, ws);
            match r.conflicts_by.get(rel.as_ref()).filter(|w| !w.is_empty()) {
                Some(who) => println!("  {rel}  (by {})", who.join(", ")),
                None => println!("  {rel}"),
            }
        }
    }
    let skipped = r.skipped_links.unwrap_or(0);
    if skipped > 0 {
        let verb = if dry_run { "would skip" } else { "skipped" };
        println!(
            "{verb} {} path(s) as the SDK does: a symlink, not a regular file, hard linked, or \
             beneath a symlink or a non-directory",
            skipped
        );
    }
    print_meanwhile(&r.changed_meanwhile, &r.partially_restored, ws);
    print_attribute_changes(&r.attribute_changes, dry_run || !r.can_rewind, ws);
    print_withheld(&r.withheld, Some(ws));
    if let Some(o) = &r.omitted {
        let who: Vec<String> = o.by_actor.iter().map(|(a, n)| format!("{a} {n}")).collect();
        println!(
            "left out {} path(s) changed since the checkpoint by actors this scope does not restore ({}): `{}` includes them",
            o.count,
            who.join(", "),
            o.command
        );
    }
}

/// What a rewind changes besides content: each path's mode, owner and attributes.
fn print_attribute_changes(changes: &[AttrChange], would: bool, ws: &Path) {
    if changes.is_empty() {
        return;
    }
    let verb = if would { "would set" } else { "set" };
    println!(
        "{verb} modes, owners or attributes of {} path(s):",
        changes.len()
    );
    // Those that touch a path's privileges first (set-user/group-ID or sticky bits, an
    // attribute, another owner for a path that is there), then the rest; at most SHOWN of them
    // (`--json` lists every one).
    const SHOWN: usize = 20;
    let weighty = |c: &&AttrChange| {
        !c.xattrs.is_empty()
            || c.owner.as_ref().is_some_and(|(from, _)| from.is_some())
            || c.mode
                .as_ref()
                .is_some_and(|(_, to)| u32::from_str_radix(to, 8).is_ok_and(|m| m & 0o7000 != 0))
    };
    let (first, rest): (Vec<&AttrChange>, Vec<&AttrChange>) = changes.iter().partition(weighty);
    if changes.len() > SHOWN {
        println!(
            "  (the first {SHOWN}, those that touch privileges first; --json lists all {})",
            changes.len()
        );
    }
    for c in first.into_iter().chain(rest).take(SHOWN) {
        let mut parts = Vec::new();
        let from = |f: &Option<String>| f.clone().unwrap_or_else(|| "(new)".into());
        if let Some((f, t)) = &c.mode {
            parts.push(format!("mode {} -> {t}", from(f)));
        }
        if let Some((f, t)) = &c.owner {
            parts.push(format!("owner {} -> {t}", from(f)));
        }
        if !c.xattrs.is_empty() {
            parts.push(format!("attributes {}", c.xattrs.join(" ")));
        }
        println!("  {}  {}", shown(&c.path, ws), parts.join(", "));
    }
}

/// What history from elsewhere would have granted and was withheld, and how to apply it.
pub(crate) fn print_withheld(w: &[Withheld], ws: Option<&Path>) {
    if w.is_empty() {
        return;
    }
    println!(
        "withheld from history that came from elsewhere (import or pull), at {} path(s):",
        w.len()
    );
    for x in w {
        let path = match ws {
            Some(ws) => shown(&x.path, ws),
            None => x.path.as_str().into(),
        };
        println!("  {path}  {}", x.what.join(", "));
    }
    println!(
        "  (another machine's history cannot grant privileges here; if you trust its source, \
         repeat with --trust-imported)"
    );
}

pub(crate) fn print_changes(
    files: &[String],
    insertions: u64,
    deletions: u64,
    verb: &str,
    ws: &Path,
    list: Listing,
) {
    println!(
        "{verb} {} file(s), +{insertions} -{deletions} lines",
        files.len()
    );
    let scope = match list {
        Listing::Summary(scope) if files.len() > SUMMED_UP_OVER => scope,
        _ => {
            for f in files {
                println!("  {}", shown(f, ws));
            }
            return;
        }
    };
    // At a terminal, a long list is summed up: what the paths are now, the first of them,
    // and a file with every one.
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in files {
        let kind = match std::fs::symlink_metadata(f) {
            Ok(m) if m.is_dir() => "director(ies)",
            Ok(m) if m.is_symlink() => "symlink(s)",
            Ok(m) if m.is_file() => "file(s)",
            Ok(_) => "other(s)",
            Err(_) => "gone",
        };
        *kinds.entry(kind).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let scope = scope.map_or(String::new(), |s| format!("scope {}; ", s.as_str()));
    println!("  {scope}now: {}", kinds.join(", "));
    for f in files.iter().take(SHOWN_FIRST) {
        println!("  {}", shown(f, ws));
    }
    let rest = files.len() - SHOWN_FIRST;
    match write_list(files, ws) {
        Ok(p) => println!(
            "  … and {rest} more: every path is in {} (--list prints them here)",
            p.display()
        ),
        Err(e) => println!("  … and {rest} more (--list prints them; the list file: {e})"),
    }
}

/// Whether a reply's paths are all printed, or summed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    Every,
    /// More than [`SUMMED_UP_OVER`] paths: the rewind's scope, what the paths are now, the
    /// first few, and a file with them all.
    Summary(Option<rewindfs::store::Scope>),
}

impl Listing {
    /// Every path when asked (`--list`) or not at a terminal (scripts read them), else a
    /// summary naming `scope`.
    pub(crate) fn of(list: bool, scope: Option<rewindfs::store::Scope>) -> Listing {
        use std::io::IsTerminal;
        if list || !std::io::stdout().is_terminal() {
            Listing::Every
        } else {
            Listing::Summary(scope)
        }
    }
}

/// At a terminal, lists longer than this are summed up.
const SUMMED_UP_OVER: usize = 20;
/// The paths a summary shows.
const SHOWN_FIRST: usize = 10;

/// Every path, one per line, into a new private file in the temporary directory.
fn write_list(files: &[String], ws: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("rewindfs-paths-")
        .suffix(".txt")
        .tempfile()?;
    for p in files {
        writeln!(f, "{}", shown(p, ws))?;
    }
    let (_, path) = f.keep().map_err(|e| e.error)?;
    Ok(path)
}
