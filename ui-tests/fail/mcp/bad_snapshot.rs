agentflow::mcp_tools! {
    pub mod everything from "../../../mcp/no_such_snapshot.json" {
        echo: read,
    }
}

agentflow::mcp_tools! {
    pub mod not_a_snapshot from "bad_snapshot.rs" {
        echo: read,
    }
}

fn main() {}
