//! Fixtures shared by the integration-test binaries: each area binary (`tests/<area>/main.rs`)
//! includes this module once and uses a part of it.
#![allow(dead_code)]

pub mod calculator;
pub mod hooked_store;
pub mod job_worker;
pub mod kill;
pub mod mcp;
pub mod openapi;
pub mod otlp;
pub mod pg;
pub mod process;
pub mod questions;
pub mod refund_subgraph;
pub mod stores;
pub mod temp;
pub mod worker_graph;
