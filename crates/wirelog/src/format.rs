//! The bytes on disk: a segment is a run of records, each
//! `magic · length · crc32 · payload`, little-endian; its index (written
//! when the segment is closed) is a run of `hash · offset` pairs, one per
//! record. Nothing here touches a file.

use crate::{Direction, Message, Recorded, Resource};

/// Marks the start of every record ("KWL1").
pub(crate) const MAGIC: u32 = 0x314C_574B;
/// magic, length, crc32.
pub(crate) const RECORD_HEAD_BYTES: usize = 12;
/// One index entry: the key's hash and the record's offset in its segment.
pub(crate) const INDEX_ENTRY_BYTES: usize = 16;
/// No record is larger: a bigger payload is a corrupt length, not a record
/// (bodies are bounded by the API's body limit, far below this).
pub(crate) const MAX_PAYLOAD_BYTES: usize = 16 << 20;

/// The value kept for a header that carries a credential.
pub const REDACTED: &str = "[redacted]";

/// Headers whose values are credentials: never written to disk.
pub fn is_secret_header(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie" | "x-api-key"
    )
}

/// FNV-1a over the resource and the id: the index's key. Stable across
/// builds (the index outlives the binary that wrote it); a collision only
/// costs reading a record that is then skipped.
pub(crate) fn key_hash(resource: Resource, id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in std::iter::once(resource as u8).chain(id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A request's headers encoded as a record holds them, taken before its
/// handler consumes the request: the record is then built from these bytes
/// without keeping (or sharing across threads) the header map itself.
#[derive(Clone, Debug, Default)]
pub struct EncodedHeaders {
    /// The count, then each name and value (credentials redacted).
    section: Vec<u8>,
}

impl EncodedHeaders {
    pub fn of(headers: &http::HeaderMap) -> EncodedHeaders {
        let mut section = Vec::with_capacity(headers_len_hint(headers));
        encode_headers(headers, &mut section);
        EncodedHeaders { section }
    }
}

/// A message's headers: the map itself, or already encoded.
#[derive(Clone, Copy)]
pub enum Headers<'a> {
    Map(&'a http::HeaderMap),
    Encoded(&'a EncodedHeaders),
}

fn headers_len_hint(headers: &http::HeaderMap) -> usize {
    2 + headers
        .iter()
        .map(|(name, value)| 4 + name.as_str().len() + value.len())
        .sum::<usize>()
}

fn put_str16(out: &mut Vec<u8>, text: &[u8]) {
    let len = text.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&text[..len]);
}

fn encode_headers(headers: &http::HeaderMap, out: &mut Vec<u8>) {
    let count = headers.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(count as u16).to_le_bytes());
    for (name, value) in headers.iter().take(count) {
        put_str16(out, name.as_str().as_bytes());
        if is_secret_header(name.as_str()) {
            put_str16(out, REDACTED.as_bytes());
        } else {
            put_str16(out, value.as_bytes());
        }
    }
}

/// The bytes [`encode`] appends for `message`, or a little more.
pub(crate) fn encoded_len_hint(message: &Message<'_>) -> usize {
    let headers = match message.headers {
        Headers::Map(map) => headers_len_hint(map),
        Headers::Encoded(encoded) => encoded.section.len(),
    };
    RECORD_HEAD_BYTES
        + 8
        + 1
        + 1
        + 2
        + 4
        + 5 * 2
        + message.id.len()
        + message.peer.len()
        + message.method.len()
        + message.target.len()
        + message.note.len()
        + headers
        + 4
        + message.body.len()
}

/// Appends one whole record to `out`; credentials' header values are
/// replaced by [`REDACTED`].
pub(crate) fn encode(message: &Message<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // length and crc, below
    out.extend_from_slice(&message.at_ms.to_le_bytes());
    out.push(message.direction as u8);
    out.push(message.resource as u8);
    out.extend_from_slice(&message.status.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&message.attempt.to_le_bytes());
    put_str16(out, message.id.as_bytes());
    put_str16(out, message.peer.as_bytes());
    put_str16(out, message.method.as_bytes());
    put_str16(out, message.target.as_bytes());
    put_str16(out, message.note.as_bytes());
    match message.headers {
        Headers::Map(map) => encode_headers(map, out),
        Headers::Encoded(encoded) => out.extend_from_slice(&encoded.section),
    }
    let body = &message.body[..message.body.len().min(MAX_PAYLOAD_BYTES / 2)];
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let payload = &out[start + RECORD_HEAD_BYTES..];
    let length = payload.len() as u32;
    let crc = crc32fast::hash(payload);
    out[start + 4..start + 8].copy_from_slice(&length.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// What [`next_record`] found at an offset.
pub(crate) enum Next<'a> {
    /// A whole, checked record: its payload and the offset after it.
    Record { payload: &'a [u8], end: usize },
    /// The end of what was written (or a torn or garbled tail): stop here.
    End,
}

/// The record at `offset` of a segment's bytes.
pub(crate) fn next_record(bytes: &[u8], offset: usize) -> Next<'_> {
    let Some(head) = bytes.get(offset..offset + RECORD_HEAD_BYTES) else {
        return Next::End;
    };
    let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    if word(0) != MAGIC {
        return Next::End;
    }
    let length = word(4) as usize;
    if length > MAX_PAYLOAD_BYTES {
        return Next::End;
    }
    let start = offset + RECORD_HEAD_BYTES;
    let Some(payload) = bytes.get(start..start + length) else {
        return Next::End;
    };
    if crc32fast::hash(payload) != word(8) {
        return Next::End;
    }
    Next::Record {
        payload,
        end: start + length,
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let taken = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(taken)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str16(&mut self) -> Option<String> {
        let len = usize::from(self.u16()?);
        Some(String::from_utf8_lossy(self.take(len)?).into_owned())
    }
}

/// The key of a record's payload, without decoding the rest.
pub(crate) fn key_of(payload: &[u8]) -> Option<(Resource, &str)> {
    let mut cursor = Cursor {
        bytes: payload,
        at: 0,
    };
    cursor.take(8 + 1)?;
    let resource = Resource::from_u8(cursor.u8()?)?;
    cursor.take(2 + 4)?;
    let len = usize::from(cursor.u16()?);
    let id = std::str::from_utf8(cursor.take(len)?).ok()?;
    Some((resource, id))
}

/// A record's payload, decoded; `None` for one this build cannot read.
pub(crate) fn decode(payload: &[u8]) -> Option<Recorded> {
    let mut cursor = Cursor {
        bytes: payload,
        at: 0,
    };
    let at_ms = cursor.i64()?;
    let direction = Direction::from_u8(cursor.u8()?)?;
    let resource = Resource::from_u8(cursor.u8()?)?;
    let status = cursor.u16()?;
    let attempt = cursor.u32()?;
    let id = cursor.str16()?;
    let peer = cursor.str16()?;
    let method = cursor.str16()?;
    let target = cursor.str16()?;
    let note = cursor.str16()?;
    let count = cursor.u16()?;
    let mut headers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let name = cursor.str16()?;
        let value = cursor.str16()?;
        headers.push((name, value));
    }
    let body_len = cursor.u32()? as usize;
    let body = cursor.take(body_len)?.to_vec();
    Some(Recorded {
        at_ms,
        direction,
        resource,
        status: (status != 0).then_some(status),
        attempt,
        id,
        peer,
        method,
        target,
        note,
        headers,
        body,
    })
}

/// One index entry.
pub(crate) fn encode_index_entry(hash: u64, offset: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
}

/// The offsets an index lists for `hash`.
pub(crate) fn offsets_in_index(index: &[u8], hash: u64) -> Vec<usize> {
    index
        .chunks_exact(INDEX_ENTRY_BYTES)
        .filter(|entry| u64::from_le_bytes(entry[..8].try_into().expect("8 bytes")) == hash)
        .map(|entry| u64::from_le_bytes(entry[8..].try_into().expect("8 bytes")) as usize)
        .collect()
}
