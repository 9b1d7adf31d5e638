//! The PostgreSQL server the tests use, for the binaries that include `tests/pg` by name
//! (`tests/crash_matrix.rs`); the area binaries use `tests/support/pg.rs` directly.

#[path = "../support/pg.rs"]
mod server;
pub use server::*;
