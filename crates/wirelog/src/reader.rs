//! Reading one resource's messages back: the segments whose time span
//! meets the range, through their indexes where they have one.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use crate::format::{self, Next, RECORD_HEAD_BYTES};
use crate::writer::{index_path, list_segments};
use crate::{Recorded, Resource};

/// What [`find`] read.
#[derive(Debug, Default)]
pub struct Found {
    /// In the order they were written (per segment, in time order).
    pub messages: Vec<Recorded>,
    /// False when a limit stopped the search before the end of the range:
    /// `searched_through_ms` says how far it got.
    pub complete: bool,
    pub searched_through_ms: Option<i64>,
}

/// The messages of `resource` `id` written in `[from_ms, to_ms]`, reading
/// at most `max_segments` segments and keeping at most `max_messages`.
pub fn find(
    dir: &Path,
    resource: Resource,
    id: &str,
    from_ms: i64,
    to_ms: i64,
    max_segments: usize,
    max_messages: usize,
) -> std::io::Result<Found> {
    let segments = match list_segments(dir) {
        Ok(segments) => segments,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(error),
    };
    let hash = format::key_hash(resource, id);
    let mut found = Found {
        complete: true,
        ..Found::default()
    };
    let mut read = 0;
    for (at, (first_at_ms, path)) in segments.iter().enumerate() {
        if *first_at_ms > to_ms {
            break;
        }
        // A segment holds messages up to the next one's first.
        let next_first = segments.get(at + 1).map(|(first, _)| *first);
        if next_first.is_some_and(|next| next < from_ms) {
            continue;
        }
        if read == max_segments || found.messages.len() >= max_messages {
            found.complete = false;
            break;
        }
        read += 1;
        let records = match read_segment(path, hash) {
            Ok(records) => records,
            // Deleted by retention since it was listed.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        for recorded in records {
            if recorded.resource == resource
                && recorded.id == id
                && (from_ms..=to_ms).contains(&recorded.at_ms)
                && found.messages.len() < max_messages
            {
                found.messages.push(recorded);
            }
        }
        found.searched_through_ms = Some(next_first.map_or(to_ms, |next| next.min(to_ms)));
    }
    found.messages.sort_by_key(|recorded| recorded.at_ms);
    Ok(found)
}

/// The records of one segment whose key hashes to `hash`: through its
/// index when it has one, else by reading it whole (the open segment).
fn read_segment(path: &Path, hash: u64) -> std::io::Result<Vec<Recorded>> {
    let index = match std::fs::read(index_path(path)) {
        Ok(index) => Some(index),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    let mut records = Vec::new();
    match index {
        Some(index) => {
            let offsets = format::offsets_in_index(&index, hash);
            if offsets.is_empty() {
                return Ok(records);
            }
            let mut file = std::fs::File::open(path)?;
            let mut head = [0u8; RECORD_HEAD_BYTES];
            for offset in offsets {
                file.seek(SeekFrom::Start(offset as u64))?;
                if file.read_exact(&mut head).is_err() {
                    continue;
                }
                let length = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
                if length > format::MAX_PAYLOAD_BYTES {
                    continue;
                }
                let mut whole = head.to_vec();
                whole.resize(RECORD_HEAD_BYTES + length, 0);
                if file.read_exact(&mut whole[RECORD_HEAD_BYTES..]).is_err() {
                    continue;
                }
                if let Next::Record { payload, .. } = format::next_record(&whole, 0) {
                    records.extend(format::decode(payload));
                }
            }
        }
        None => {
            let bytes = std::fs::read(path)?;
            let mut offset = 0;
            while let Next::Record { payload, end } = format::next_record(&bytes, offset) {
                if format::key_of(payload).map(|(resource, id)| format::key_hash(resource, id))
                    == Some(hash)
                {
                    records.extend(format::decode(payload));
                }
                offset = end;
            }
        }
    }
    Ok(records)
}
