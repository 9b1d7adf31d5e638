//! `#[graph]` over an inline module of `#[node]` fns: parse -> IR -> check -> expand.

pub mod algo;
pub mod check;
pub mod expand;
pub mod ir;
pub mod parse;
