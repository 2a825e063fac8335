//! Components built against earlier contracts: each version's records,
//! converted from and to the current one's. The host builds the current
//! (`wasmgate:filter@0.4.0`) records and converts them one version down at
//! a time: [`v0_3`] to 0.3.0's, [`v0_2`] from 0.3.0's to 0.2.0's, [`v0_1`]
//! from 0.2.0's to 0.1.0's. What a version lacks is filled as that version
//! filled it: a field a filter's `reads` leaves out is an empty string in
//! 0.2.0's records.

pub(crate) mod v0_1;
pub(crate) mod v0_2;
pub(crate) mod v0_3;

pub(crate) use v0_2::log_level;
