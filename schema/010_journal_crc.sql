-- rewindfs store: the journal's frames carry a CRC-64/NVME checksum. Shipped migrations are
-- never edited.

-- No table changes. The journal files (`<store>/journal`, `journal.1`) now hold frames whose
-- length word has its top bit set and whose checksum is CRC-64/NVME instead of FNV-1a-64
-- (`src/store/journal.rs`). An older rewindfs would read such a frame as a torn tail and drop
-- the records a crash left there, pre-images among them; this version number makes it refuse
-- the store instead ("newer than this rewindfs supports"). Bundles carry rows, not journal
-- frames, and still say schema 9 (`ROWS_SCHEMA_VERSION`).
