//! One event, one line: the text log's writer escapes every control
//! character of a formatted event but its final newline, so no value that
//! came from a request (a decoded path, a JSON string, a header) can start
//! a forged log line or drive the operator's terminal, whichever call site
//! logged it and however (`%value` writes a value as it is).
//!
//! It relies on tracing-subscriber's fmt layer formatting each event into
//! a buffer and handing it over in one `write_all`, so each `write` is one
//! event. The JSON format needs none of this: serde escapes every control
//! character inside strings.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// A [`MakeWriter`] whose writers escape control characters; see the
/// module's documentation.
pub struct OneLine<M> {
    inner: M,
    colours: bool,
}

impl<M> OneLine<M> {
    /// `colours`: the formatter writes ANSI colours (a terminal), whose
    /// `ESC [ … m` sequences are kept; every other ESC is escaped.
    pub fn new(inner: M, colours: bool) -> OneLine<M> {
        OneLine { inner, colours }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter {
            inner: self.inner.make_writer(),
            colours: self.colours,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        OneLineWriter {
            inner: self.inner.make_writer_for(meta),
            colours: self.colours,
        }
    }
}

pub struct OneLineWriter<W> {
    inner: W,
    colours: bool,
}

impl<W: Write> Write for OneLineWriter<W> {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        match escaped(event, self.colours) {
            None => self.inner.write_all(event)?,
            Some(line) => self.inner.write_all(&line)?,
        }
        Ok(event.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `event` with its control characters escaped as `\u{d}` (as
/// `hub::log_safe` writes them) but a final newline; `None` when nothing
/// needed escaping (the usual case: no copy).
fn escaped(event: &[u8], colours: bool) -> Option<Vec<u8>> {
    let (body, newline) = match event.strip_suffix(b"\n") {
        Some(body) => (body, true),
        None => (event, false),
    };
    let first = find_control(body, 0, colours)?;
    let mut out = Vec::with_capacity(event.len() + 16);
    out.extend_from_slice(&body[..first]);
    let mut at = first;
    while at < body.len() {
        let next = find_control(body, at, colours).unwrap_or(body.len());
        out.extend_from_slice(&body[at..next]);
        if next == body.len() {
            break;
        }
        // A C1 control is two bytes in UTF-8 (0xC2 0x80..=0x9F).
        let (code, width) = match body[next] {
            0xC2 => (u32::from(body[next + 1]), 2),
            byte => (u32::from(byte), 1),
        };
        let _ = write!(out, "\\u{{{code:x}}}");
        at = next + width;
    }
    if newline {
        out.push(b'\n');
    }
    Some(out)
}

/// The index of the first control character of `text` from `from`: C0,
/// DEL or C1, except, with `colours`, an ESC that starts a colour
/// (`ESC [ digits and ; m`).
fn find_control(text: &[u8], from: usize, colours: bool) -> Option<usize> {
    let mut at = from;
    while at < text.len() {
        match text[at] {
            0x1B if colours && is_colour(&text[at..]) => {}
            0x00..=0x1F | 0x7F => return Some(at),
            0xC2 if text
                .get(at + 1)
                .is_some_and(|next| (0x80..=0x9F).contains(next)) =>
            {
                return Some(at)
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// Whether `text` starts with an SGR sequence (colours, bold, dim, reset):
/// all the fmt layer writes, and nothing that moves the cursor or
/// rewrites a line.
fn is_colour(text: &[u8]) -> bool {
    let Some(rest) = text.strip_prefix(b"\x1b[") else {
        return false;
    };
    let parameters = rest
        .iter()
        .take_while(|byte| byte.is_ascii_digit() || **byte == b';')
        .count();
    rest.get(parameters) == Some(&b'm')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(events: &[&[u8]], colours: bool) -> String {
        let mut writer = OneLineWriter {
            inner: Vec::new(),
            colours,
        };
        for event in events {
            writer.write_all(event).unwrap();
        }
        String::from_utf8(writer.inner).unwrap()
    }

    #[test]
    fn an_event_is_one_line_whatever_its_values() {
        let forged = "WARN refused detail=x\r\nFAKE LOG LINE\u{0}\u{85}\u{7f}\tz\n";
        let out = written(&[forged.as_bytes(), b"INFO next\n"], false);
        assert_eq!(
            out,
            "WARN refused detail=x\\u{d}\\u{a}FAKE LOG LINE\\u{0}\\u{85}\\u{7f}\\u{9}z\nINFO next\n"
        );
        assert_eq!(out.lines().count(), 2);
        assert!(!out.lines().any(|line| line.starts_with("FAKE")));
    }

    #[test]
    fn a_clean_event_is_written_as_it_is() {
        assert!(escaped(b"INFO serving api=127.0.0.1:3000 \xc3\xa9\n", false).is_none());
        assert_eq!(written(&[b"no newline"], false), "no newline");
    }

    #[test]
    fn colours_are_kept_only_on_a_terminal_and_only_colours() {
        let event = b"\x1b[32m INFO\x1b[0m \x1b[2mx\x1b[0m=\x1b]0;title\x07 \x1b[2J\n";
        assert_eq!(
            written(&[event], true),
            "\x1b[32m INFO\x1b[0m \x1b[2mx\x1b[0m=\\u{1b}]0;title\\u{7} \\u{1b}[2J\n"
        );
        assert_eq!(
            written(&[b"\x1b[32mINFO\x1b[0m\n"], false),
            "\\u{1b}[32mINFO\\u{1b}[0m\n"
        );
    }
}
