//! The scripted model and the operations of the adversarial suite: model replies that swap,
//! reuse or duplicate call ids and change arguments, human decisions, and their strategies.

use crate::adversarial_world::*;
use agentflow::message::ToolCall;
use agentflow::model::ChatReply;
use proptest::prelude::*;
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Mutex;

// ---------------------------------------------------------------- the scripted model

/// One tool call of a generated reply.
#[derive(Debug, Clone)]
pub struct GenCall {
    pub id: u8,
    pub tool: usize,
    pub order: u8,
    pub amount: f64,
    pub hold_ms: u64,
}

impl GenCall {
    pub fn call(&self) -> ToolCall {
        let args = json!({ "order": format!("o{}", self.order), "amount": self.amount, "hold_ms": self.hold_ms });
        ToolCall::new(format!("c{}", self.id), TOOLS[self.tool], args)
    }
}

/// What the model answers when next asked, resolved when it is asked.
#[derive(Debug, Clone)]
pub enum Reply {
    /// These calls (ids from a small pool, so they repeat across turns and
    /// within one reply).
    Calls(Vec<GenCall>),
    /// The last tool-call reply again, faithfully.
    Repeat,
    /// The last tool-call reply with each call's tool swapped for another
    /// (an approved `refund_order` becomes `delete_account`), same ids and
    /// arguments.
    Swap,
    /// The last tool-call reply with each amount changed (a computed float).
    Rescale(f64),
    /// No tool calls: the node's step ends (it runs again in the next).
    Done,
}

#[derive(Default)]
pub struct Script {
    pub queue: VecDeque<Reply>,
    pub last: Vec<ToolCall>,
}

pub fn serve(script: &Mutex<Script>) -> ChatReply {
    let mut script = script.lock().unwrap();
    let Some(next) = script.queue.pop_front() else {
        return ChatReply::text("stop");
    };
    let calls = match next {
        Reply::Done => return ChatReply::text("done"),
        Reply::Calls(calls) => calls.iter().map(GenCall::call).collect(),
        Reply::Repeat => script.last.clone(),
        Reply::Swap => script
            .last
            .iter()
            .map(|c| {
                let to = if c.name == "delete_account" { "refund_order" } else { "delete_account" };
                ToolCall::new(c.id.clone(), to, c.arguments.clone())
            })
            .collect(),
        Reply::Rescale(factor) => script
            .last
            .iter()
            .map(|c| {
                let mut args = c.arguments.clone();
                let amount = args["amount"].as_f64().unwrap_or(1.0) * factor;
                args["amount"] = json!(amount);
                ToolCall::new(c.id.clone(), c.name.clone(), args)
            })
            .collect(),
    };
    if calls.is_empty() {
        return ChatReply::text("done");
    }
    script.last.clone_from(&calls);
    ChatReply { tool_calls: calls, ..ChatReply::default() }
}

// ---------------------------------------------------------------- operations

#[derive(Debug, Clone, Copy)]
pub enum Human {
    Approve,
    /// Approve with other (valid) arguments: this amount.
    Edit(f64),
    Reject,
    Cancel,
    /// Decide nothing until the approval's time to live has passed.
    LetExpire,
    Succeeded,
    Failed,
    RunAgain,
}

#[derive(Debug, Clone)]
pub enum Op {
    /// Queue a model reply.
    Model(Reply),
    /// Queue these model replies, then run (or resume) the thread until it
    /// ends or pauses (the model says `stop` once its replies are used up).
    Drive(Vec<Reply>),
    /// Run (or resume) the thread, dropping the run future after `polls`
    /// polls or `ms` milliseconds: a crash at a random await (a tool may be
    /// holding its call).
    Crash { replies: Vec<Reply>, polls: u32, ms: Option<u64> },
    /// Resume with a run deadline this far away.
    Deadline { ms: u64 },
    /// Resume, and after `polls` polls let another executor take the
    /// thread's lease (its clock is past the lease's expiry), then give it
    /// back once the run ended.
    LeaseLoss { polls: u32 },
    /// Decide the `pick`-th record waiting for a human.
    Decide { pick: usize, how: Human },
    /// Decide every record waiting for a human the same way, queue the
    /// model's answer to the node asking again, and resume (`crash`: drop
    /// the resumed run after that many polls).
    Continue { how: Human, then: Reply, crash: Option<u32> },
    /// A human writes to the (perhaps paused) thread.
    UpdateState { amount: f64 },
    /// Fork the thread at the `pick`-th checkpoint.
    Fork { pick: usize },
}

pub fn amount() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(10.0),
        Just(0.1),
        // Computed floats, as a model or a node computes them.
        (1u32..2000).prop_map(|cents| f64::from(cents) / 100.0 * 0.15),
        (1u32..1000).prop_map(|total| f64::from(total) * 0.15),
    ]
}

pub fn gen_call() -> impl Strategy<Value = GenCall> {
    (0u8..3, 0usize..TOOLS.len(), 0u8..2, amount(), prop_oneof![2 => Just(0u64), 1 => Just(50u64)])
        .prop_map(|(id, tool, order, amount, hold_ms)| GenCall { id, tool, order, amount, hold_ms })
}

pub fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        4 => prop::collection::vec(gen_call(), 1..4).prop_map(Reply::Calls),
        2 => Just(Reply::Repeat),
        2 => Just(Reply::Swap),
        1 => prop_oneof![Just(2.0), Just(0.15), Just(1.1)].prop_map(Reply::Rescale),
        1 => Just(Reply::Done),
    ]
}

/// What the model answers when the node asks again after a decision.
pub fn after_decision() -> impl Strategy<Value = Reply> {
    prop_oneof![
        4 => Just(Reply::Repeat),
        2 => Just(Reply::Swap),
        1 => prop_oneof![Just(2.0), Just(0.15)].prop_map(Reply::Rescale),
        1 => prop::collection::vec(gen_call(), 1..3).prop_map(Reply::Calls),
    ]
}

pub fn human() -> impl Strategy<Value = Human> {
    prop_oneof![
        4 => Just(Human::Approve),
        1 => amount().prop_map(Human::Edit),
        1 => Just(Human::Reject),
        1 => Just(Human::Cancel),
        1 => Just(Human::LetExpire),
        1 => Just(Human::Succeeded),
        1 => Just(Human::Failed),
        2 => Just(Human::RunAgain),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => reply().prop_map(Op::Model),
        4 => prop::collection::vec(reply(), 0..4).prop_map(Op::Drive),
        3 => (prop::collection::vec(reply(), 0..3), 1u32..60, prop::option::weighted(0.8, 1u64..60))
            .prop_map(|(replies, polls, ms)| Op::Crash { replies, polls, ms }),
        1 => prop_oneof![Just(1u64), Just(10), Just(25)].prop_map(|ms| Op::Deadline { ms }),
        1 => (1u32..30).prop_map(|polls| Op::LeaseLoss { polls }),
        3 => (0usize..3, human()).prop_map(|(pick, how)| Op::Decide { pick, how }),
        6 => (human(), after_decision(), prop::option::weighted(0.3, 1u32..40))
            .prop_map(|(how, then, crash)| Op::Continue { how, then, crash }),
        1 => amount().prop_map(|amount| Op::UpdateState { amount }),
        1 => (0usize..8).prop_map(|pick| Op::Fork { pick }),
    ]
}
