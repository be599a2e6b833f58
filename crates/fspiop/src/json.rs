//! JSON plumbing: writing bodies by hand, and "loose" serde types that let a
//! derived struct tell an absent field from one of the wrong JSON type, so
//! every error can name the field at fault.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// FSPIOP's `ExtensionList` bounds.
pub const EXTENSION_LIST_MAX_ITEMS: usize = 16;
pub const EXTENSION_KEY_MAX_CHARS: usize = 32;
pub const EXTENSION_VALUE_MAX_CHARS: usize = 128;

// ---------------------------------------------------------------- writing

/// The longest prefix of `text` with at most `max` characters.
pub(crate) fn truncate_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text; // at most `max` bytes, so at most `max` characters
    }
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Number of characters, without counting when the byte length settles it.
pub(crate) fn char_len_at_most(text: &str, max: usize) -> bool {
    text.len() <= max || text.chars().count() <= max
}

/// Appends `text` as a JSON string literal.
pub(crate) fn push_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..index]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = index + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

pub(crate) fn push_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `"extensionList":{"extension":[{"key":..,"value":..},..]}`.
///
/// Keeps the output schema-valid whatever the caller passes: entries with
/// an empty key or value are skipped, keys are cut to 32 characters and
/// values to 128, and only the first 16 entries are written. Writes nothing
/// at all when no entry is left (an empty list is not allowed).
pub fn push_extension_list(out: &mut Vec<u8>, extensions: &[(&str, &str)]) {
    let mut usable = extensions
        .iter()
        .filter(|(key, value)| !key.is_empty() && !value.is_empty())
        .take(EXTENSION_LIST_MAX_ITEMS)
        .peekable();
    if usable.peek().is_none() {
        // Undo a separator the caller may have written.
        if out.last() == Some(&b',') {
            out.pop();
        }
        return;
    }
    out.extend_from_slice(b"\"extensionList\":{\"extension\":[");
    for (index, (key, value)) in usable.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"key\":");
        push_str(out, truncate_chars(key, EXTENSION_KEY_MAX_CHARS));
        out.extend_from_slice(b",\"value\":");
        push_str(out, truncate_chars(value, EXTENSION_VALUE_MAX_CHARS));
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

// ---------------------------------------------------------------- reading

/// Generates the visitor methods that turn every JSON kind other than the
/// expected one into `Wrong(kind)`, consuming nested values fully.
macro_rules! wrong_kinds {
    ($value:ty, skip_str = $skip_str:tt, skip_map = $skip_map:tt, skip_seq = $skip_seq:tt) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$value, E> {
            Ok(<$value>::wrong("a boolean"))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$value, E> {
            Ok(<$value>::wrong("a number"))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$value, E> {
            Ok(<$value>::wrong("a number"))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$value, E> {
            Ok(<$value>::wrong("a number"))
        }
        fn visit_unit<E: de::Error>(self) -> Result<$value, E> {
            Ok(<$value>::wrong("null"))
        }
        fn visit_none<E: de::Error>(self) -> Result<$value, E> {
            Ok(<$value>::wrong("null"))
        }
        wrong_kinds!(@str $value, $skip_str);
        wrong_kinds!(@map $value, $skip_map);
        wrong_kinds!(@seq $value, $skip_seq);
    };
    (@str $value:ty, true) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$value, E> {
            Ok(<$value>::wrong("a string"))
        }
    };
    (@str $value:ty, false) => {};
    (@map $value:ty, true) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(<$value>::wrong("an object"))
        }
    };
    (@map $value:ty, false) => {};
    (@seq $value:ty, true) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(<$value>::wrong("an array"))
        }
    };
    (@seq $value:ty, false) => {};
}

/// A JSON property expected to be a string.
#[derive(Debug, Default)]
pub(crate) enum JsonStr<'a> {
    #[default]
    Absent,
    Text(Cow<'a, str>),
    /// Present with another JSON kind ("a number", "null", ...).
    Wrong(&'static str),
}

impl JsonStr<'_> {
    fn wrong(kind: &'static str) -> Self {
        JsonStr::Wrong(kind)
    }
}

struct StrVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
    type Value = JsonStr<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JsonStr<'a>, E> {
        Ok(JsonStr::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonStr<'a>, E> {
        Ok(JsonStr::Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<JsonStr<'a>, E> {
        Ok(JsonStr::Text(Cow::Owned(v)))
    }

    wrong_kinds!(
        JsonStr<'a>,
        skip_str = false,
        skip_map = true,
        skip_seq = true
    );
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrVisitor(PhantomData))
    }
}

/// A JSON property expected to be an object, read as `T`.
#[derive(Debug, Default)]
pub(crate) enum JsonObj<T> {
    #[default]
    Absent,
    Present(T),
    Wrong(&'static str),
}

impl<T> JsonObj<T> {
    fn wrong(kind: &'static str) -> Self {
        JsonObj::Wrong(kind)
    }
}

struct ObjVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
    type Value = JsonObj<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<JsonObj<T>, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(JsonObj::Present)
    }

    wrong_kinds!(
        JsonObj<T>,
        skip_str = true,
        skip_map = false,
        skip_seq = true
    );
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for JsonObj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjVisitor(PhantomData))
    }
}

/// A JSON property expected to be an array of `T`. At most `MAX` items are
/// kept (the rest are skipped, not allocated), but all are counted.
#[derive(Debug, Default)]
pub(crate) enum JsonArr<T, const MAX: usize> {
    #[default]
    Absent,
    Items {
        items: Vec<T>,
        len: usize,
    },
    Wrong(&'static str),
}

impl<T, const MAX: usize> JsonArr<T, MAX> {
    fn wrong(kind: &'static str) -> Self {
        JsonArr::Wrong(kind)
    }
}

struct ArrVisitor<T, const MAX: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for ArrVisitor<T, MAX> {
    type Value = JsonArr<T, MAX>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonArr<T, MAX>, A::Error> {
        let mut items = Vec::new();
        let mut len = 0usize;
        loop {
            let more = if items.len() < MAX {
                match seq.next_element::<T>()? {
                    Some(item) => {
                        items.push(item);
                        true
                    }
                    None => false,
                }
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !more {
                break;
            }
            len += 1;
        }
        Ok(JsonArr::Items { items, len })
    }

    wrong_kinds!(JsonArr<T, MAX>, skip_str = true, skip_map = true, skip_seq = false);
}

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for JsonArr<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArrVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn push_str_escapes_control_characters() {
        let mut out = Vec::new();
        push_str(&mut out, "a\u{0}b\u{1f}c\"\\\u{8}\u{c}\r");
        assert_eq!(out, br#""a\u0000b\u001fc\"\\\b\f\r""#);
    }

    #[test]
    fn push_u64_writes_digits() {
        for value in [0u64, 7, 10, 3100, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, value);
            assert_eq!(out, value.to_string().as_bytes());
        }
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate_chars("abc", 2), "ab");
        assert_eq!(truncate_chars("éé", 1), "é");
        assert_eq!(truncate_chars("éé", 2), "éé");
        assert!(char_len_at_most("éé", 2));
        assert!(!char_len_at_most("ééé", 2));
    }

    #[test]
    fn extension_list_is_bounded() {
        let many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut out = b"{".to_vec();
        push_extension_list(&mut out, &pairs);
        out.push(b'}');
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            value["extensionList"]["extension"]
                .as_array()
                .unwrap()
                .len(),
            16
        );

        let mut out = b"{\"a\":1,".to_vec();
        push_extension_list(&mut out, &[("", "x"), ("y", "")]);
        out.push(b'}');
        assert_eq!(out, br#"{"a":1}"#);

        let long_key = "k".repeat(40);
        let long_value = "v".repeat(200);
        let mut out = b"{".to_vec();
        push_extension_list(&mut out, &[(&long_key, &long_value)]);
        out.push(b'}');
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let item = &value["extensionList"]["extension"][0];
        assert_eq!(item["key"].as_str().unwrap().len(), 32);
        assert_eq!(item["value"].as_str().unwrap().len(), 128);
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Probe<'a> {
        #[serde(borrow)]
        s: JsonStr<'a>,
        o: JsonObj<Inner>,
        a: JsonArr<u8, 2>,
    }

    #[derive(Deserialize, Default, Debug)]
    struct Inner {
        x: u8,
    }

    #[test]
    fn loose_types_classify_json_kinds() {
        let probe: Probe =
            serde_json::from_str(r#"{"s":"text","o":{"x":1},"a":[1,2,3,4]}"#).unwrap();
        assert!(matches!(probe.s, JsonStr::Text(Cow::Borrowed("text"))));
        assert!(matches!(probe.o, JsonObj::Present(Inner { x: 1 })));
        assert!(matches!(probe.a, JsonArr::Items { ref items, len: 4 } if items == &[1, 2]));

        let probe: Probe = serde_json::from_str(r#"{"s":"a\nb"}"#).unwrap();
        assert!(matches!(probe.s, JsonStr::Text(Cow::Owned(ref s)) if s == "a\nb"));
        assert!(matches!(probe.o, JsonObj::Absent));
        assert!(matches!(probe.a, JsonArr::Absent));

        let probe: Probe =
            serde_json::from_str(r#"{"s":{"deep":[1,{"x":null}]},"o":[1],"a":"no"}"#).unwrap();
        assert!(matches!(probe.s, JsonStr::Wrong("an object")));
        assert!(matches!(probe.o, JsonObj::Wrong("an array")));
        assert!(matches!(probe.a, JsonArr::Wrong("a string")));

        for (json, kind) in [
            ("null", "null"),
            ("1", "a number"),
            ("-1.5", "a number"),
            ("true", "a boolean"),
            ("[]", "an array"),
        ] {
            let text = format!(r#"{{"s":{json}}}"#);
            let probe: Probe = serde_json::from_str(&text).unwrap();
            assert!(matches!(probe.s, JsonStr::Wrong(k) if k == kind), "{json}");
        }
    }
}
