//! Rules over the state IR.

use super::ir::StateIr;
use crate::diag::{Diagnostics, Kind};

/// The update tracks set fields in a `u64`.
pub const MAX_FIELDS: usize = 64;

pub fn check_all(ir: &StateIr, diags: &mut Diagnostics) {
    check_field_count(ir, diags);
}

// The typed update records which fields it sets in one bit each, so that
// same-step conflicts cost one AND at run time.
fn check_field_count(ir: &StateIr, diags: &mut Diagnostics) {
    if ir.fields.len() > MAX_FIELDS {
        diags.push(
            Kind::Syntax,
            ir.loc,
            format!(
                "`{}` has {} fields; a state supports at most {MAX_FIELDS}: group related fields into nested structs",
                ir.name,
                ir.fields.len()
            ),
        );
    }
}
