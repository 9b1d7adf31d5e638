//! What a schedule's runs get besides their input: [`ScheduleOptions`] (tenant, webhook).

/// The tenant and webhook of a schedule's runs
/// ([`App::schedule_with`](crate::App::schedule_with)); the default: no tenant, no webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleOptions {
    /// The tenant each thread is created for; the actor making the schedule must act for it.
    pub tenant: Option<String>,
    /// A URL told when each run first stops
    /// ([`NewRun::webhook`](agentflow_store::NewRun::webhook)); the app keeps it as given (a
    /// server checks it against the prefixes its operator allows).
    pub webhook: Option<String>,
}

impl ScheduleOptions {
    /// No tenant, no webhook.
    pub fn new() -> Self {
        ScheduleOptions::default()
    }

    /// Sets [`ScheduleOptions::tenant`].
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Sets [`ScheduleOptions::webhook`].
    #[must_use]
    pub fn webhook(mut self, url: impl Into<String>) -> Self {
        self.webhook = Some(url.into());
        self
    }
}
