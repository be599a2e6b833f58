//! kasi HTTP side (being written).
