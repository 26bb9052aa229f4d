-- rewindfs store: extended attributes in pre-images. Shipped migrations are never edited.
-- (This file says nothing of its number, so that it can be renumbered if another migration
-- lands first: rename it and its line in src/store/migrate.rs.)

-- The extended attributes a capture saw (user.*, and as root every namespace), as
-- (name, value) pairs in name order, each a u32 LE length and its bytes. NULL: not recorded
-- (an absent path, a symlink, or a capture taken before this column existed), and a rewind to
-- such a state leaves the path's attributes as they are.
ALTER TABLE captures ADD COLUMN xattrs BLOB;
