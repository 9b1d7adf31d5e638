//! `mcp_tools!`: an MCP server's committed snapshot -> typed tool items.
//! parse -> IR -> schema (the snapshot's tools typed) -> check -> expand.

pub mod check;
pub mod expand;
pub mod ir;
pub mod names;
pub mod parse;
pub mod schema;
