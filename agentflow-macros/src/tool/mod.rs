//! `#[tool]` on an async fn: parse -> IR -> check -> expand.

pub mod check;
pub mod expand;
pub mod ir;
pub mod parse;
