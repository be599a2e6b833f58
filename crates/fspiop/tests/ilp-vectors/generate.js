// Builds the ilpPacket test vectors of crates/fspiop/src/ilp.rs the way
// Mojaloop's SDK does (mojaloop/sdk-standard-components src/lib/ilp:
// IlpBase.makeIlpData, IlpV1.getResponseIlp, IlpV4.calculateIlpPacket),
// with the npm packages that code pins:
//
//   npm install ilp-packet@3.1.3 ilp-packet-v1@npm:ilp-packet@2.2.0 \
//     base64url@3.0.1 safe-stable-stringify
//   node generate.js
//
// Prints one JSON object per vector: its name, the ilpPacket, and the
// parties the Rust reader must find (null where it must find none).
'use strict'

const crypto = require('crypto')
const base64url = require('base64url')
const stringify = require('safe-stable-stringify')
const ilpV4 = require('ilp-packet')
const ilpV1 = require('ilp-packet-v1')

const SECRET = 'kasi-test-vectors'

// IlpBase.makeIlpData: the data field holds the ASCII of the base64url
// of the (key-sorted) transaction JSON.
const ilpData = (tx) => Buffer.from(base64url(stringify(tx)))

// IlpV1: an ILP v1 "ILP Payment" (type 1) to g.<fspId>.<type>.<id>[.<subId>]
// lowercased; the amount in minor units (KES has 2 decimals).
const v1Packet = (tx) => {
  const { fspId, partyIdType, partyIdentifier, partySubIdOrType } = tx.payee.partyIdInfo
  const account = `g.${fspId}.${partyIdType.toLowerCase()}.${partyIdentifier.toLowerCase()}` +
    (partySubIdOrType ? `.${partySubIdOrType.toLowerCase()}` : '')
  const amount = String(Math.round(Number(tx.amount.amount) * 100))
  const packet = ilpV1.serializeIlpPayment({ amount, account, data: ilpData(tx) })
  return base64url.fromBase64(packet.toString('base64'))
}

// IlpV4: an ILP v4 "Prepare" (type 12) to g.mojaloop, expiring at the
// transaction's expiration, its condition the SHA-256 of the HMAC fulfilment.
const v4Packet = (tx, amount) => {
  const key = Buffer.from(Buffer.from(SECRET).toString('base64'), 'ascii')
  const fulfilment = crypto.createHmac('sha256', key)
    .update(Buffer.from(Buffer.from(stringify(tx)).toString('base64'), 'ascii'))
    .digest('base64url')
  const condition = crypto.createHash('sha256').update(base64url.toBuffer(fulfilment)).digest()
  const expiresAt = new Date(tx.conversionTerms ? tx.conversionTerms.expiration : tx.expiration)
  const packet = ilpV4.serializeIlpPrepare({
    amount,
    destination: 'g.mojaloop',
    expiresAt,
    executionCondition: condition,
    data: ilpData(tx)
  })
  return base64url.fromBase64(packet.toString('base64'))
}

// The transaction object of IlpBase.getQuoteResponseIlp (dto.transactionObjectDto).
const transaction = (payer, payee, extra) => ({
  quoteId: '9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a',
  transactionId: '2c3d4e5f-6a7b-4c8d-9e0f-a1b2c3d4e5f6',
  transactionType: { scenario: 'TRANSFER', initiator: 'PAYER', initiatorType: 'CONSUMER' },
  payee,
  payer,
  expiration: '2026-11-26T14:05:09.123Z',
  amount: { amount: '1050.25', currency: 'KES' },
  note: 'Loyer de novembre',
  ...extra
})

const party = (fspId, partyIdType, partyIdentifier, partySubIdOrType, name) => ({
  partyIdInfo: { partyIdType, partyIdentifier, ...(partySubIdOrType && { partySubIdOrType }), fspId },
  name,
  personalInfo: {
    complexName: { firstName: name.split(' ')[0], lastName: name.split(' ')[1] },
    dateOfBirth: '1984-01-01'
  }
})

const expected = (tx) => ({
  payer: tx.payer.partyIdInfo,
  payee: tx.payee.partyIdInfo
})

const payerSub = party('dfspa', 'PERSONAL_ID', '16135551212', 'DRIVING_LICENSE', 'Henrik Karlsson')
const payeeSub = party('dfspb', 'ACCOUNT_ID', 'FR7630006000011234567890189', 'EUR-1', 'Amélie Ngọc')
const payerPlain = party('dfspa', 'MSISDN', '22507008181', undefined, 'Mats Hagman')
const payeePlain = party('dfspb', 'EMAIL', 'awa.diop@example.org', undefined, 'Awa Diop')

const vectors = []
const sub = transaction(payerSub, payeeSub)
vectors.push({ name: 'v1_payment_sub_ids', ilpPacket: v1Packet(sub), ...expected(sub) })
vectors.push({ name: 'v4_prepare_sub_ids', ilpPacket: v4Packet(sub, '105025'), ...expected(sub) })
const plain = transaction(payerPlain, payeePlain)
vectors.push({ name: 'v1_payment_no_sub_ids', ilpPacket: v1Packet(plain), ...expected(plain) })
vectors.push({ name: 'v4_prepare_no_sub_ids', ilpPacket: v4Packet(plain, '105025'), ...expected(plain) })
// A transaction object with only the party ids: data of 128-255 bytes, so
// the data's length prefix has one length byte (0x81).
const small = {
  expiration: '2026-11-26T14:05:09.123Z',
  payer: { partyIdInfo: { partyIdType: 'MSISDN', partyIdentifier: '1' } },
  payee: { partyIdInfo: { partyIdType: 'MSISDN', partyIdentifier: '2' } }
}
vectors.push({ name: 'v4_prepare_small', ilpPacket: v4Packet(small, '1'), ...expected(small) })
// IlpBase.getFxQuoteResponseIlp: an FX quote's packet has no parties.
const fx = {
  conversionRequestId: 'b51ec534-ee48-4575-b6a9-ead2955b8069',
  conversionTerms: {
    conversionId: '581f68ef-b54f-416f-9161-ac34e889a84b',
    initiatingFsp: 'dfspa',
    counterPartyFsp: 'fxp1',
    amountType: 'SEND',
    sourceAmount: { currency: 'XOF', amount: '1050' },
    targetAmount: { currency: 'EUR', amount: '1.60' },
    expiration: '2026-11-26T14:05:09.123Z'
  }
}
vectors.push({ name: 'v4_prepare_fx_conversion', ilpPacket: v4Packet(fx, '0'), payer: null, payee: null })

for (const v of vectors) {
  // Mojaloop's own decoders read each packet back (IlpV1/IlpV4.decodeIlpPacket,
  // IlpBase.getTransactionObject).
  const bin = Buffer.from(v.ilpPacket, 'base64')
  const decoded = bin[0] === 1 ? ilpV1.deserializeIlpPayment(bin) : ilpV4.deserializeIlpPrepare(bin)
  JSON.parse(base64url.decode(decoded.data.toString()))
  console.log(JSON.stringify(v))
}
