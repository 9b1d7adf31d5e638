//! `schedules` through the socket of the server holding a redb file: `GET /api/schedules`, and
//! `DELETE /api/schedules/{id}` for `schedules delete ID`, as the person the server maps this OS
//! user to.

use axum::http::Method;
use serde_json::{Value, json};

use super::{Server, segment};
use crate::schedules::{ScheduleAction, SchedulesArgs, print};
use crate::{Outcome, out};

impl Server {
    /// `schedules [delete ID]`, from the server's schedule routes.
    pub(super) fn schedules(&self, args: &SchedulesArgs, as_json: bool) -> Outcome {
        match &args.action {
            None => {
                let answer = self.get("/api/schedules")?;
                self.acting_as(&answer);
                let body = self.ok(answer)?;
                // The input is the server's to show (masked); the table leaves it out.
                let rows: Vec<Value> = body.as_array().cloned().unwrap_or_default();
                print(&rows, as_json)
            }
            Some(ScheduleAction::Delete { id }) => {
                let answer = self.call(Method::DELETE, &format!("/api/schedules/{}", segment(id)), None)?;
                self.acting_as(&answer);
                self.ok(answer)?;
                if as_json {
                    return out::json(&json!({ "id": id, "unscheduled": true }));
                }
                outln!("removed schedule `{id}`; the runs it started are left as they are")
            }
        }
    }
}
