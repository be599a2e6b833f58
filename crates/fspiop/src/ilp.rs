//! The payer's and payee's party ids inside a transfer prepare's
//! `ilpPacket`, so the hub can file a transfer by party
//! (docs/design/back-office.md, "Party ids on the transfer path").
//!
//! # What Mojaloop puts in `ilpPacket`
//!
//! Read in mojaloop/sdk-standard-components v19.19 (`src/lib/ilp/IlpBase.js`,
//! `IlpV1.js`, `IlpV4.js`; used by mojaloop/sdk-scheme-adapter's
//! `InboundTransfersModel.js`, which picks v1 or v4 by its `ILP_VERSION`
//! setting, default 1, not by the FSPIOP version, and by
//! mojaloop/ml-testing-toolkit's `ilpModel.js`), interledgerjs/ilp-packet
//! v2.2.0 and v3.0.9 (`index.ts`; 3.1.3's npm build the same) and
//! interledgerjs/oer-utils v1.3.4 and v5.0.1 (`src/lib/reader.ts`):
//!
//! * The payee's DFSP builds it when answering a quote; the transfer carries
//!   it unchanged. Its `data` is `base64url(JSON)` of the transaction object
//!   (`quoteId`, `transactionId`, `transactionType`, `payee`, `payer`,
//!   `expiration`, `amount`, `note`; keys sorted by safe-stable-stringify),
//!   as ASCII bytes (`IlpBase.makeIlpData`), for both ILP versions. An FX
//!   quote's packet holds `{conversionRequestId, conversionTerms}` instead,
//!   with no parties.
//! * ILP v1 (`ilp-packet@2.2.0`, `serializeIlpPayment`): type 1 "ILP
//!   Payment": amount (UInt64), account (`g.<fspId>.<type>.<id>[.<subId>]`,
//!   lowercased: lossy, so not read here), data, then one extensions byte (0).
//! * ILP v4 (`ilp-packet@3.1.3`, `serializeIlpPrepare`): type 12 "Prepare":
//!   amount (UInt64), expiresAt (17 ASCII digits, `YYYYMMDDHHmmssSSS`),
//!   executionCondition (32 bytes), destination (always `g.mojaloop`), data.
//! * Both wrap the fields in an envelope: the type byte, then the fields as
//!   one variable-length octet string. OER length prefixes: one byte below
//!   128, else `0x80 | n` and the length in `n` big-endian bytes, the
//!   shortest that fits (oer-utils refuses any longer form, and so does this
//!   reader). Bytes after the field read are ignored, as ilp-packet does.
//! * The whole packet is base64url without padding
//!   (`base64url.fromBase64`); Mojaloop reads it back with node's
//!   `Buffer.from(_, 'base64')`, which takes either alphabet, padded or not.
//!
//! A packet this reader cannot use gives `None`; the hub then files the
//! transfer without party ids.

use crate::party::{check_party_identifier, check_party_sub_id, parse_party_id_type};
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use serde::Deserialize;
use std::borrow::Cow;

/// The longest `ilpPacket` text [`transaction_parties`] decodes (the
/// schema's limit is 32768; this bounds the work on anything longer).
pub const ILP_PACKET_DECODE_MAX_CHARS: usize = 64 * 1024;

const TYPE_ILP_PAYMENT: u8 = 1;
const TYPE_ILP_PREPARE: u8 = 12;
const UINT64_LEN: usize = 8;
const INTERLEDGER_TIME_LEN: usize = 17;
const CONDITION_LEN: usize = 32;

/// A party as the transaction names it (`partyIdInfo`'s `partyIdType`,
/// `partyIdentifier`, `partySubIdOrType`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartyRef {
    pub id_type: String,
    pub identifier: String,
    pub sub_id: Option<String>,
}

impl PartyRef {
    /// `TYPE/identifier` or `TYPE/identifier/subId`, the form of the
    /// registry's [`ledger::PartyKey`]: unambiguous, since neither part may
    /// hold a `/`.
    pub fn key(&self) -> String {
        match &self.sub_id {
            Some(sub_id) => format!("{}/{}/{sub_id}", self.id_type, self.identifier),
            None => format!("{}/{}", self.id_type, self.identifier),
        }
    }
}

/// The payer and payee of the transaction an `ilpPacket` carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IlpParties {
    pub payer: PartyRef,
    pub payee: PartyRef,
}

/// Reads the payer's and payee's party ids out of an `ilpPacket` built as
/// Mojaloop builds it (ILP v1 payment or ILP v4 prepare, see the module
/// documentation), in base64 or base64url, padded or not.
///
/// `None` for anything else: text over [`ILP_PACKET_DECODE_MAX_CHARS`], bad
/// base64, another packet type, a length running past its container or not
/// in its shortest form, `data` that is not base64url of a JSON object with
/// `payer.partyIdInfo` and `payee.partyIdInfo`, or a party id the hub's
/// `/parties/{Type}/{ID}/{SubId}` would refuse (see
/// [`crate::parse_party_key`]). An empty `partySubIdOrType` counts as
/// absent. Never panics.
pub fn transaction_parties(ilp_packet: &str) -> Option<IlpParties> {
    with_transaction_parties(ilp_packet, |payer, payee| IlpParties {
        payer: payer.to_party_ref(),
        payee: payee.to_party_ref(),
    })
}

/// The payer's and payee's keys (as [`PartyRef::key`]), read as
/// [`transaction_parties`] reads them: the transfer path's form, which
/// allocates nothing but the two keys (a packet is decoded into buffers the
/// thread keeps, and the JSON's strings are borrowed).
pub fn transaction_party_keys(ilp_packet: &str) -> Option<(String, String)> {
    with_transaction_parties(ilp_packet, |payer, payee| (payer.key(), payee.key()))
}

/// Decodes the packet, then its `data` (the transaction's JSON), and gives
/// the two parties, checked, to `answer`.
fn with_transaction_parties<R>(
    ilp_packet: &str,
    answer: impl FnOnce(CheckedParty<'_>, CheckedParty<'_>) -> R,
) -> Option<R> {
    if ilp_packet.len() > ILP_PACKET_DECODE_MAX_CHARS {
        return None;
    }
    DECODED.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        let (packet, json) = &mut *buffers;
        decode_base64_into(ilp_packet, packet)?;
        let data = packet_data(packet)?;
        decode_base64_into(std::str::from_utf8(data).ok()?, json)?;
        let transaction: Transaction<'_> = serde_json::from_slice(json).ok()?;
        Some(answer(
            transaction.payer.party_id_info.checked()?,
            transaction.payee.party_id_info.checked()?,
        ))
    })
}

/// The whole transaction object an `ilpPacket` carries (`quoteId`,
/// `transactionId`, `payer`, `payee`, `amount`, `note`, ...), as JSON, for
/// a person to read (the console's transfer page); `None` as for
/// [`transaction_parties`], or when it is not a JSON object.
pub fn transaction_json(ilp_packet: &str) -> Option<serde_json::Value> {
    if ilp_packet.len() > ILP_PACKET_DECODE_MAX_CHARS {
        return None;
    }
    let (mut packet, mut json) = (Vec::new(), Vec::new());
    decode_base64_into(ilp_packet, &mut packet)?;
    decode_base64_into(std::str::from_utf8(packet_data(&packet)?).ok()?, &mut json)?;
    serde_json::from_slice::<serde_json::Value>(&json)
        .ok()
        .filter(serde_json::Value::is_object)
}

thread_local! {
    /// The packet's bytes and the transaction's JSON, decoded on the
    /// transfer path for every prepare: kept, so that a prepare costs no
    /// allocation for them (bounded: a packet is at most
    /// [`ILP_PACKET_DECODE_MAX_CHARS`] characters).
    static DECODED: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

// Node's decoder takes padding or none, and ignores stray low bits.
const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);
const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);

/// Decodes `text` into `out` (cleared first); `None` when it is not base64.
fn decode_base64_into(text: &str, out: &mut Vec<u8>) -> Option<()> {
    // Without an early exit, so that it is vectorised (a packet is ~1 KB).
    let standard = text.as_bytes().chunks(32).fold(false, |seen, chunk| {
        seen | chunk
            .iter()
            .fold(false, |seen, &b| seen | (b == b'+') | (b == b'/'))
    });
    let engine = if standard { &STANDARD } else { &URL_SAFE };
    out.clear();
    engine.decode_vec(text, out).ok()
}

/// The `data` field of an ILP v1 payment or ILP v4 prepare.
fn packet_data(packet: &[u8]) -> Option<&[u8]> {
    let mut envelope = Reader(packet);
    let packet_type = envelope.take(1)?[0];
    let mut fields = Reader(envelope.var_octets()?);
    match packet_type {
        TYPE_ILP_PAYMENT => {
            fields.take(UINT64_LEN)?;
            fields.var_octets()?; // account
        }
        TYPE_ILP_PREPARE => {
            fields.take(UINT64_LEN + INTERLEDGER_TIME_LEN + CONDITION_LEN)?;
            fields.var_octets()?; // destination
        }
        _ => return None,
    }
    fields.var_octets()
}

/// OER reading over a byte slice; every read checks the bytes are there.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.0.len() {
            return None;
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(taken)
    }

    fn var_octets(&mut self) -> Option<&'a [u8]> {
        let len = self.length_prefix()?;
        self.take(len)
    }

    fn length_prefix(&mut self) -> Option<usize> {
        let first = self.take(1)?[0];
        if first & 0x80 == 0 {
            return Some(usize::from(first));
        }
        let len_len = usize::from(first & 0x7f);
        if len_len == 0 || len_len > 8 {
            return None;
        }
        let len = self
            .take(len_len)?
            .iter()
            .fold(0u64, |len, &b| len << 8 | u64::from(b));
        let shortest_from = if len_len == 1 {
            128
        } else {
            1u64 << ((len_len - 1) * 8)
        };
        if len < shortest_from {
            return None;
        }
        usize::try_from(len).ok()
    }
}

// Only what is read; serde skips the rest of the transaction object. The
// strings are borrowed from the JSON unless they hold an escape.
#[derive(Deserialize)]
struct Transaction<'a> {
    #[serde(borrow)]
    payer: Party<'a>,
    #[serde(borrow)]
    payee: Party<'a>,
}

#[derive(Deserialize)]
struct Party<'a> {
    #[serde(rename = "partyIdInfo", borrow)]
    party_id_info: PartyIdInfo<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartyIdInfo<'a> {
    #[serde(borrow)]
    party_id_type: Cow<'a, str>,
    #[serde(borrow)]
    party_identifier: Cow<'a, str>,
    #[serde(default, borrow)]
    party_sub_id_or_type: Option<Cow<'a, str>>,
}

/// A party id the hub's `/parties/{Type}/{ID}/{SubId}` would take.
struct CheckedParty<'a> {
    id_type: &'static str,
    identifier: Cow<'a, str>,
    sub_id: Option<Cow<'a, str>>,
}

impl<'a> PartyIdInfo<'a> {
    fn checked(self) -> Option<CheckedParty<'a>> {
        let sub_id = self.party_sub_id_or_type.filter(|s| !s.is_empty());
        let id_type = parse_party_id_type(&self.party_id_type).ok()?;
        check_party_identifier(&self.party_identifier).ok()?;
        if let Some(sub_id) = &sub_id {
            check_party_sub_id(sub_id).ok()?;
        }
        Some(CheckedParty {
            id_type: id_type.as_str(),
            identifier: self.party_identifier,
            sub_id,
        })
    }
}

impl CheckedParty<'_> {
    fn to_party_ref(&self) -> PartyRef {
        PartyRef {
            id_type: self.id_type.to_owned(),
            identifier: self.identifier.clone().into_owned(),
            sub_id: self.sub_id.as_ref().map(|s| s.clone().into_owned()),
        }
    }

    /// As [`PartyRef::key`], in one allocation.
    fn key(&self) -> String {
        let sub_len = self.sub_id.as_ref().map_or(0, |s| s.len() + 1);
        let mut key =
            String::with_capacity(self.id_type.len() + 1 + self.identifier.len() + sub_len);
        key.push_str(self.id_type);
        key.push('/');
        key.push_str(&self.identifier);
        if let Some(sub_id) = &self.sub_id {
            key.push('/');
            key.push_str(sub_id);
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD as STANDARD_PAD, URL_SAFE_NO_PAD};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Made by tests/ilp-vectors/generate.js with the npm packages
    /// Mojaloop's SDK pins (ilp-packet 3.1.3 and 2.2.0, base64url 3.0.1,
    /// safe-stable-stringify), building each packet as
    /// sdk-standard-components' IlpV1/IlpV4 do; one JSON object a line:
    /// `name`, `ilpPacket`, and the `partyIdInfo` of `payer` and `payee`
    /// (null where the packet has no parties).
    const VECTORS: &str = include_str!("../tests/ilp-vectors/vectors.jsonl");

    /// The example `ilpPacket` of the FSPIOP v1.1 API definition
    /// (fspiop-v1.1-openapi3-implementation.yaml, fspiop-v1.1-openapi2.yaml):
    /// an ILP v1 payment whose data is a PSK 1.0 message, not a transaction.
    const OPENAPI_EXAMPLE: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";

    struct Vector {
        name: String,
        ilp_packet: String,
        parties: Option<IlpParties>,
    }

    fn party_ref(info: &Value) -> PartyRef {
        PartyRef {
            id_type: info["partyIdType"].as_str().unwrap().to_owned(),
            identifier: info["partyIdentifier"].as_str().unwrap().to_owned(),
            sub_id: info["partySubIdOrType"].as_str().map(str::to_owned),
        }
    }

    fn vectors() -> Vec<Vector> {
        let vectors: Vec<Vector> = VECTORS
            .lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line).unwrap();
                Vector {
                    name: v["name"].as_str().unwrap().to_owned(),
                    ilp_packet: v["ilpPacket"].as_str().unwrap().to_owned(),
                    parties: (!v["payer"].is_null()).then(|| IlpParties {
                        payer: party_ref(&v["payer"]),
                        payee: party_ref(&v["payee"]),
                    }),
                }
            })
            .collect();
        assert_eq!(vectors.len(), 6);
        vectors
    }

    fn vector(name: &str) -> Vector {
        vectors().into_iter().find(|v| v.name == name).unwrap()
    }

    fn raw(v: &Vector) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(&v.ilp_packet).unwrap()
    }

    /// An OER variable-length octet string, length in its shortest form.
    fn var_octets(bytes: &[u8]) -> Vec<u8> {
        let len = bytes.len();
        let mut out = if len < 128 {
            vec![len as u8]
        } else {
            let be = (len as u64).to_be_bytes();
            let skip = be.iter().take_while(|&&b| b == 0).count();
            let mut prefix = vec![0x80 | (8 - skip) as u8];
            prefix.extend_from_slice(&be[skip..]);
            prefix
        };
        out.extend_from_slice(bytes);
        out
    }

    /// An ILP v4 prepare to g.mojaloop carrying `data` as it is.
    fn prepare_with_data(data: &[u8]) -> Vec<u8> {
        let mut fields = vec![0u8; UINT64_LEN];
        fields.extend_from_slice(b"20261126140509123");
        fields.extend_from_slice(&[7u8; CONDITION_LEN]);
        fields.extend(var_octets(b"g.mojaloop"));
        fields.extend(var_octets(data));
        let mut packet = vec![TYPE_ILP_PREPARE];
        packet.extend(var_octets(&fields));
        packet
    }

    /// An ILP v4 prepare whose data is the transaction `transaction`, as
    /// Mojaloop encodes it, in base64url without padding.
    fn prepare_with(transaction: &Value) -> String {
        let data = URL_SAFE_NO_PAD.encode(serde_json::to_vec(transaction).unwrap());
        URL_SAFE_NO_PAD.encode(prepare_with_data(data.as_bytes()))
    }

    fn transaction() -> Value {
        json!({
            "payer": {"partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "22507008181", "fspId": "dfspa"}},
            "payee": {"partyIdInfo": {"partyIdType": "IBAN", "partyIdentifier": "FR7630006000011234567890189", "partySubIdOrType": "EUR", "fspId": "dfspb"}},
        })
    }

    #[test]
    fn mojaloop_packets_give_their_parties() {
        for v in vectors() {
            assert_eq!(transaction_parties(&v.ilp_packet), v.parties, "{}", v.name);
            // The transfer path's form reads the same keys, twice over on
            // one thread (its buffers are kept between packets).
            for _ in 0..2 {
                assert_eq!(
                    transaction_party_keys(&v.ilp_packet),
                    v.parties.as_ref().map(|p| (p.payer.key(), p.payee.key())),
                    "{}",
                    v.name
                );
            }
        }
        let v = vector("v1_payment_sub_ids");
        assert_eq!(raw(&v)[0], TYPE_ILP_PAYMENT);
        let parties = transaction_parties(&v.ilp_packet).unwrap();
        assert_eq!(
            parties.payer.key(),
            "PERSONAL_ID/16135551212/DRIVING_LICENSE"
        );
        assert_eq!(
            parties.payee.key(),
            "ACCOUNT_ID/FR7630006000011234567890189/EUR-1"
        );
        let v = vector("v4_prepare_no_sub_ids");
        assert_eq!(raw(&v)[0], TYPE_ILP_PREPARE);
        let parties = transaction_parties(&v.ilp_packet).unwrap();
        assert_eq!(parties.payer.key(), "MSISDN/22507008181");
        assert_eq!(parties.payee.key(), "EMAIL/awa.diop@example.org");
    }

    #[test]
    fn the_whole_transaction_reads_as_json_with_its_quote_and_parties() {
        let v = vector("v4_prepare_no_sub_ids");
        let transaction = transaction_json(&v.ilp_packet).unwrap();
        assert!(transaction["quoteId"].is_string(), "{transaction}");
        assert!(transaction["transactionId"].is_string(), "{transaction}");
        assert_eq!(
            transaction["payer"]["partyIdInfo"]["partyIdentifier"],
            "22507008181"
        );
        assert_eq!(transaction_json("not a packet"), None);
        assert_eq!(
            transaction_json(&"A".repeat(ILP_PACKET_DECODE_MAX_CHARS + 1)),
            None
        );
    }

    #[test]
    fn the_vectors_cover_each_length_prefix_form() {
        // Envelope 0x82 (two length bytes); the small one's data 0x81.
        let small = raw(&vector("v4_prepare_small"));
        assert_eq!(small[1], 0x82);
        let data_prefix = 4 + UINT64_LEN + INTERLEDGER_TIME_LEN + CONDITION_LEN + 11;
        assert_eq!(small[data_prefix], 0x81);
        assert!(transaction_parties(&vector("v4_prepare_small").ilp_packet).is_some());
    }

    #[test]
    fn either_base64_alphabet_with_or_without_padding() {
        let (mut padded, mut standard_only) = (false, false);
        for v in vectors() {
            let bytes = raw(&v);
            let standard_padded = STANDARD_PAD.encode(&bytes);
            let url_padded = base64::engine::general_purpose::URL_SAFE.encode(&bytes);
            let standard_bare = standard_padded.trim_end_matches('=');
            padded |= url_padded.ends_with('=');
            standard_only |= standard_bare.contains(['+', '/']);
            for text in [&standard_padded, &url_padded, standard_bare] {
                assert_eq!(transaction_parties(text), v.parties, "{}: {text}", v.name);
            }
        }
        assert!(
            padded && standard_only,
            "the vectors exercise padding and '+' or '/'"
        );
        // One alphabet a packet: '+' with '-' is neither.
        let text = vectors()
            .into_iter()
            .map(|v| v.ilp_packet)
            .find(|text| text.contains('-') && text.contains('_'))
            .unwrap();
        assert_eq!(transaction_parties(&text.replace('-', "+")), None);
    }

    #[test]
    fn the_openapi_example_is_a_payment_without_a_transaction() {
        let bytes = URL_SAFE_NO_PAD.decode(OPENAPI_EXAMPLE).unwrap();
        let data = packet_data(&bytes).expect("an ILP v1 payment");
        assert!(data.starts_with(b"PSK/1.0\n"));
        assert_eq!(transaction_parties(OPENAPI_EXAMPLE), None);
    }

    #[test]
    fn only_payments_and_prepares() {
        let mut bytes = raw(&vector("v4_prepare_sub_ids"));
        for packet_type in [0u8, 2, 8, 11, 13, 14, 255] {
            bytes[0] = packet_type;
            assert_eq!(
                transaction_parties(&URL_SAFE_NO_PAD.encode(&bytes)),
                None,
                "type {packet_type}"
            );
        }
    }

    #[test]
    fn lengths_must_fit_and_be_shortest() {
        let good = URL_SAFE_NO_PAD
            .decode(prepare_with(&transaction()))
            .unwrap();
        let fields = Reader(&good[1..]).var_octets().unwrap();
        assert_eq!(good[1], 0x82, "the envelope's length takes two bytes");
        let envelope = |prefix: &[u8]| {
            let mut packet = vec![TYPE_ILP_PREPARE];
            packet.extend_from_slice(prefix);
            packet.extend_from_slice(fields);
            transaction_parties(&URL_SAFE_NO_PAD.encode(packet))
        };
        let [hi, lo] = u16::try_from(fields.len()).unwrap().to_be_bytes();
        assert!(envelope(&[0x82, hi, lo]).is_some());
        // One byte more than there is.
        let [hi_over, lo_over] = u16::try_from(fields.len() + 1).unwrap().to_be_bytes();
        assert_eq!(envelope(&[0x82, hi_over, lo_over]), None);
        // The same length in three or eight bytes, in none, in nine.
        assert_eq!(envelope(&[0x83, 0, hi, lo]), None);
        assert_eq!(envelope(&[0x88, 0, 0, 0, 0, 0, 0, hi, lo]), None);
        assert_eq!(envelope(&[0x80]), None);
        assert_eq!(envelope(&[0x89, 0, 0, 0, 0, 0, 0, 0, hi, lo]), None);
        // The edges of the one-byte and two-byte long forms.
        assert_eq!(Reader(&[0x81, 127]).length_prefix(), None);
        assert_eq!(Reader(&[0x81, 128]).length_prefix(), Some(128));
        assert_eq!(Reader(&[0x82, 0, 255]).length_prefix(), None);
        assert_eq!(Reader(&[0x82, 1, 0]).length_prefix(), Some(256));
        assert_eq!(Reader(&[0x82, 1]).length_prefix(), None);
        assert_eq!(Reader(&[0x7f]).length_prefix(), Some(127));
        let huge = [0x88, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0];
        assert_eq!(Reader(&huge).var_octets(), None);
    }

    #[test]
    fn text_over_64_kib_is_refused() {
        let sized = |note_len: usize| {
            let mut transaction = transaction();
            transaction["note"] = json!("n".repeat(note_len));
            prepare_with(&transaction)
        };
        // base64 of base64: the note grows the text by about 16/9.
        let mut note_len = (ILP_PACKET_DECODE_MAX_CHARS - 1000) * 9 / 16;
        while sized(note_len + 1).len() <= ILP_PACKET_DECODE_MAX_CHARS {
            note_len += 1;
        }
        let largest = sized(note_len);
        assert!(largest.len() <= ILP_PACKET_DECODE_MAX_CHARS);
        assert!(largest.len() > ILP_PACKET_DECODE_MAX_CHARS - 4);
        assert!(transaction_parties(&largest).is_some());
        let over = sized(note_len + 1);
        assert!(over.len() > ILP_PACKET_DECODE_MAX_CHARS);
        assert_eq!(transaction_parties(&over), None);
    }

    #[test]
    fn the_transaction_must_name_both_parties_as_the_hub_would() {
        let parties = transaction_parties(&prepare_with(&transaction())).unwrap();
        assert_eq!(parties.payee.key(), "IBAN/FR7630006000011234567890189/EUR");
        let edits: [(&str, Value); 9] = [
            ("/payer", Value::Null),
            ("/payee/partyIdInfo", json!("MSISDN/1")),
            ("/payer/partyIdInfo/partyIdType", json!("PHONE")),
            ("/payer/partyIdInfo/partyIdType", json!("msisdn")),
            ("/payer/partyIdInfo/partyIdentifier", json!("")),
            ("/payer/partyIdInfo/partyIdentifier", json!("225/07")),
            ("/payer/partyIdInfo/partyIdentifier", json!(22507008181u64)),
            (
                "/payee/partyIdInfo/partySubIdOrType",
                json!("a".repeat(129)),
            ),
            ("/payee/partyIdInfo/partySubIdOrType", json!("EUR#1")),
        ];
        for (pointer, value) in edits {
            let mut transaction = transaction();
            *transaction.pointer_mut(pointer).unwrap() = value;
            assert_eq!(
                transaction_parties(&prepare_with(&transaction)),
                None,
                "{pointer}"
            );
        }
        let mut transaction = transaction();
        transaction["payee"]["partyIdInfo"]["partySubIdOrType"] = json!("");
        let parties = transaction_parties(&prepare_with(&transaction)).unwrap();
        assert_eq!(parties.payee.sub_id, None);
        assert_eq!(parties.payee.key(), "IBAN/FR7630006000011234567890189");
    }

    #[test]
    fn escaped_json_strings_read_as_their_text() {
        // The borrowed strings fall back to owned ones where the JSON has
        // an escape; the key is the unescaped text.
        let data = br#"{"payer":{"partyIdInfo":{"partyIdType":"MSISDN","partyIdentifier":"2250\u0037008181"}},"payee":{"partyIdInfo":{"partyIdType":"EMAIL","partyIdentifier":"awa.diop@example.org","partySubIdOrType":"\u0045UR"}}}"#;
        let text = URL_SAFE_NO_PAD.encode(data);
        let packet = URL_SAFE_NO_PAD.encode(prepare_with_data(text.as_bytes()));
        let keys = (
            "MSISDN/22507008181".to_string(),
            "EMAIL/awa.diop@example.org/EUR".to_string(),
        );
        assert_eq!(transaction_party_keys(&packet), Some(keys.clone()));
        let parties = transaction_parties(&packet).unwrap();
        assert_eq!((parties.payer.key(), parties.payee.key()), keys);
    }

    #[test]
    fn data_must_be_base64url_of_a_json_object() {
        let json = serde_json::to_vec(&transaction()).unwrap();
        assert_eq!(
            transaction_parties(&URL_SAFE_NO_PAD.encode(prepare_with_data(&json))),
            None
        );
        for data in [&b"e30"[..], b"", b"!!!!", b"WzFd", &[0xff, 0xfe]] {
            assert_eq!(
                transaction_parties(&URL_SAFE_NO_PAD.encode(prepare_with_data(data))),
                None
            );
        }
    }

    #[test]
    fn no_text_at_all() {
        for text in [
            "",
            "=",
            "==",
            "A",
            "AA",
            "AAA=",
            "DA",
            "DAA",
            "AQA",
            "\u{1f4a9}",
        ] {
            assert_eq!(transaction_parties(text), None, "{text:?}");
        }
    }

    /// Every truncation and many corruptions of real packets: no panic, and
    /// a truncation loses the parties.
    #[test]
    fn truncated_or_corrupted_packets_do_not_panic() {
        for v in vectors() {
            let bytes = raw(&v);
            for len in 0..bytes.len() {
                let truncated = URL_SAFE_NO_PAD.encode(&bytes[..len]);
                assert_eq!(transaction_parties(&truncated), None, "{} at {len}", v.name);
            }
            for len in 0..v.ilp_packet.len() {
                transaction_parties(&v.ilp_packet[..len]);
            }
            for at in 0..bytes.len() {
                for mask in [0x01u8, 0x40, 0x80, 0xff] {
                    let mut corrupt = bytes.clone();
                    corrupt[at] ^= mask;
                    transaction_parties(&URL_SAFE_NO_PAD.encode(&corrupt));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_does_not_panic(text in ".{0,400}") {
            transaction_parties(&text);
        }

        #[test]
        fn arbitrary_bytes_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            transaction_parties(&URL_SAFE_NO_PAD.encode(&bytes));
            transaction_parties(&URL_SAFE_NO_PAD.encode(prepare_with_data(&bytes)));
        }

        #[test]
        fn spliced_real_packets_do_not_panic(
            index in 0usize..6,
            at in any::<prop::sample::Index>(),
            junk in prop::collection::vec(any::<u8>(), 0..16),
        ) {
            let mut bytes = raw(&vectors()[index]);
            let at = at.index(bytes.len());
            bytes.splice(at..(at + junk.len()).min(bytes.len()), junk);
            let text = URL_SAFE_NO_PAD.encode(&bytes);
            prop_assert_eq!(
                transaction_party_keys(&text),
                transaction_parties(&text).map(|p| (p.payer.key(), p.payee.key()))
            );
        }
    }
}
