//! FSPIOP v1.1 wire format (being written).
