//! The clock stamped on records: milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 on a clock set before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A Unix-milliseconds time as a civil date and time in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year (proleptic Gregorian).
    pub year: u64,
    /// 1 to 12.
    pub month: u64,
    /// 1 to 31.
    pub day: u64,
    /// 0 to 23.
    pub hour: u64,
    /// 0 to 59.
    pub minute: u64,
    /// 0 to 59.
    pub second: u64,
    /// 0 to 999.
    pub milli: u64,
}

/// `ms` after the Unix epoch as a civil date and time in UTC (days to a date by H. Hinnant's
/// algorithm).
pub fn civil(ms: u64) -> Civil {
    let (days, ms_of_day) = (ms / 86_400_000, ms % 86_400_000);
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: ms_of_day / 3_600_000,
        minute: ms_of_day / 60_000 % 60,
        second: ms_of_day / 1000 % 60,
        milli: ms_of_day % 1000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_cross_leap_days_and_centuries() {
        let c = civil(951_827_696_789);
        assert_eq!((c.year, c.month, c.day, c.hour, c.minute, c.second, c.milli), (2000, 2, 29, 12, 34, 56, 789));
        assert_eq!(civil(0), Civil { year: 1970, month: 1, day: 1, hour: 0, minute: 0, second: 0, milli: 0 });
        let c = civil(4_107_542_400_000); // 2100-03-01, the day after a century with no leap day
        assert_eq!((c.year, c.month, c.day), (2100, 3, 1));
    }
}
