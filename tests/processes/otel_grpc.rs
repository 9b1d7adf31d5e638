//! The one test of OTLP over gRPC (feature `otel-grpc`): the `otel` example, run as in
//! `otel_trace.rs` but with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, starts a refund in one process
//! and approves and resumes it in another; a gRPC collector of this test (tonic serving the
//! protocol's generated `TraceService`) receives the spans: one trace, the thread's stored one,
//! with both invocations under the `create_thread` root and the model and tool calls in it,
//! and nothing else (no span of the transport itself).
//!
//! The variables are set on the child processes only: this process's environment is not
//! changed while other tests run.

use std::time::Duration;

use crate::otel_trace::{count, example, run, stored_trace};
use crate::support::otlp::{OtlpReceiver, named};
use crate::support::temp::temp_dir;

#[test]
fn spans_reach_a_collector_over_otlp_grpc() {
    let receiver = OtlpReceiver::start_grpc();
    let dir = temp_dir("otel-grpc");
    let db = dir.join("refunds.redb");
    let thread = "refund-grpc-1";
    let common = ["--store", db.to_str().expect("a UTF-8 path"), "--thread", thread];
    for (mode, done) in [("start", "waiting for approval apr-"), ("approve", "resume `refund-grpc-1`: Completed")] {
        let mut cmd = example(&receiver, false, &[&[mode], common.as_slice()].concat());
        let out = run(cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"));
        assert!(out.contains(done), "{out}");
    }

    let spans = receiver.wait_for(Duration::from_secs(10), |s| count(s, "invoke_agent refunds") >= 2);
    assert!(receiver.requests() >= 2, "an export request over gRPC from each process");
    let traceparent = stored_trace(&db, thread).expect("the thread stores its trace");
    let ids: Vec<&str> = traceparent.split('-').collect();
    let (trace_id, root_id) = (ids[1], ids[2]);
    let outside: Vec<(&str, &str)> =
        spans.iter().filter(|s| s.trace_id != trace_id).map(|s| (s.name.as_str(), s.scope.as_str())).collect();
    assert!(outside.is_empty(), "spans outside the thread's trace (name, scope): {outside:?}");
    let root = named(&spans, "create_thread");
    assert_eq!(root.len(), 1, "one create_thread root");
    assert_eq!(root[0].span_id, root_id, "the stored root");
    let invokes = named(&spans, "invoke_agent refunds");
    assert_eq!(invokes.len(), 2);
    assert!(invokes.iter().all(|s| s.parent_span_id.as_deref() == Some(root_id)), "invocations under the root");
    let chats = named(&spans, "chat scripted-test-double");
    assert_eq!(chats.len(), 2, "two model calls");
    assert!(chats.iter().all(|c| c.str_attr("gen_ai.operation.name") == Some("chat")));
    let tool = named(&spans, "execute_tool process_refund");
    assert!(tool.iter().any(|t| t.str_attr("gen_ai.tool.call.id") == Some("call_refund_1")), "the refund call");
    assert!(spans.iter().all(|s| s.resource_str("service.name") == Some("refund-agent")));
    let _ = std::fs::remove_dir_all(&dir);
}
