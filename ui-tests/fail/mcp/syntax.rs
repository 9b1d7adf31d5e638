agentflow::mcp_tools! {
    pub mod everything "../../../mcp/everything.json" {
        echo: read,
    }
}

agentflow::mcp_tools! {
    pub mod other from "../../../mcp/everything.json" {
        echo: read idempotnet,
    }
}

fn main() {}
