//! How many durable commits an approved tool call costs: the claim
//! `APPROVED -> EXECUTING` rides the transaction of the call's *started*
//! marker, and the result the transaction of `EXECUTING -> SUCCEEDED` (with
//! its audit entry), so the gateway makes two durable commits per call.

#[path = "../../benches/workloads/approved.rs"]
mod approved;

#[tokio::test]
async fn an_approved_call_costs_two_durable_commits_besides_the_step() {
    let (all, steps) = approved::commits_per_approved_call("commits-1").await;
    assert_eq!(steps, 1, "the resumed run commits its one step");
    assert_eq!(all - steps, 2, "the claim with the started marker, then the result with the final status");
}
