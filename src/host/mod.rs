//! The host side of transfers: page-locked staging and strided copies ([`staging`]) and the
//! crew of helper threads that packs and unpacks ([`crew`]).

pub(crate) mod crew;
pub(crate) mod fresh;
pub(crate) mod staging;
