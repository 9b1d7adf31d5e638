//! `#[graph]` over an inline module of `#[node]` fns:
//! parse (syn -> [`ir`]) -> [`resolve`] (names -> indexes) -> [`check`]
//! (pure rules, every error collected) -> [`expand`] (tokens).

pub mod algo;
pub mod check;
pub mod expand;
pub mod expand_release;
pub mod ir;
pub mod listed;
pub mod lock;
pub mod parse;
pub mod release_parse;
pub mod resolve;
pub mod signature;
