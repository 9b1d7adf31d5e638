use agentflow::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
struct Account {
    id: String,
}

/// Deletes an account.
#[tool(risk = irreversible, compensate = restore_account)]
async fn delete_account(args: Account) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

/// Looks an account up.
#[tool(risk = read, compensate = restore_account)]
async fn find_account(args: Account) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

/// Restores an account.
#[tool(risk = reversible)]
async fn restore_account(args: Account) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

fn main() {
    let _ = (delete_account, find_account, restore_account);
}
