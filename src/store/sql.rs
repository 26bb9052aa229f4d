//! How the store's domain values are written to and read from SQLite columns: as the strings
//! of their `as_str` (the stored form, which never changes), read back by their total `parse`.

use rusqlite::ToSql;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};

use super::model::{
    Actor, BlobRef, CheckpointKind, Kind, Op, OriginKind, Purpose, RewindScope, RewindState, Scope,
    Xattrs,
};
use crate::wspath::{Node, WsPath};

/// Implements both directions for a type with `as_str(self) -> &'static str` and a total
/// `parse(&str) -> Self`.
macro_rules! text_column {
    ($t:ty) => {
        impl ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }
        impl FromSql for $t {
            fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
                v.as_str().map(<$t>::parse)
            }
        }
    };
}

text_column!(Actor);
text_column!(Kind);
text_column!(Op);
text_column!(Purpose);
text_column!(CheckpointKind);
text_column!(RewindState);
text_column!(RewindScope);
text_column!(OriginKind);

impl ToSql for Scope {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for Scope {
    fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
        // A scope this build does not know is the widest one.
        v.as_str().map(|s| Scope::parse(s).unwrap_or(Scope::All))
    }
}

impl ToSql for BlobRef {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for BlobRef {
    fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
        v.as_str().map(BlobRef::from_stored)
    }
}

/// `captures.xattrs`: [`Xattrs::encode`]'s form (read back by `captures.rs`, where a value that
/// does not decode reads as "not recorded", which a rewind leaves alone).
impl ToSql for Xattrs {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.encode()))
    }
}

/// Path columns hold a path's bytes as a blob (the root's, where a column may name it, are
/// empty). Reading one back checks it again: a row that names no place inside the workspace is
/// an error, never a path handed on.
impl ToSql for WsPath {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self.as_bytes())))
    }
}

impl FromSql for WsPath {
    fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
        let b = path_bytes(v)?;
        WsPath::parse(b).map_err(|why| bad(b, why))
    }
}

impl ToSql for Node {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self.as_bytes())))
    }
}

impl FromSql for Node {
    fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
        let b = path_bytes(v)?;
        Node::parse(b).map_err(|why| bad(b, why))
    }
}

fn bad(bytes: &[u8], why: crate::wspath::PathError) -> FromSqlError {
    FromSqlError::Other(Box::new(super::error::BadStoredPath {
        bytes: bytes.to_vec(),
        why,
    }))
}

/// A path column's bytes: a blob, or text where an older build wrote one.
fn path_bytes(v: ValueRef<'_>) -> FromSqlResult<&[u8]> {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(b),
        _ => Err(FromSqlError::InvalidType),
    }
}
