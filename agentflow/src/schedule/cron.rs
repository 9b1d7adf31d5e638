//! A cron expression read for a schedule ([`Cron`]): five fields, in UTC, and the next time it
//! names after a given instant.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike};
use croner::parser::{CronParser, Seconds, Year};

/// The syntax a schedule's cron expression takes, for messages.
pub const CRON_SYNTAX: &str = "five fields separated by spaces, `minute hour day-of-month month day-of-week` \
     (e.g. `*/15 * * * *`, `0 9 * * MON-FRI`, `30 2 1 * *`), in UTC, or one of `@hourly`, `@daily`, \
     `@weekly`, `@monthly`, `@yearly`";

/// The longest cron expression kept (a real one is a few dozen characters).
pub const MAX_CRON_LEN: usize = 200;

/// A cron expression of a schedule, read: standard five fields (`minute hour day-of-month month
/// day-of-week`), evaluated in UTC, one occurrence per matching minute.
///
/// Each field takes `*`, numbers, ranges (`1-5`), lists (`1,15`) and steps (`*/10`, `0-30/5`);
/// months and weekdays take their English names too (`JAN`, `MON`; Sunday is `0` or `7`). As in
/// standard cron, a day matches when day-of-month *or* day-of-week matches, if both are
/// restricted. `@hourly`, `@daily` (`@midnight` is not taken), `@weekly`, `@monthly`, `@yearly`
/// and `@annually` stand for their five-field forms. The extensions croner reads beyond that
/// (`L`, `W`, `#`, `?`) are taken as croner defines them. Six- and seven-field forms (seconds,
/// years) are refused: a schedule fires at most once a minute.
///
/// ```
/// use agentflow::schedule::Cron;
///
/// let cron: Cron = "0 9 * * MON-FRI".parse()?;
/// // 2024-01-05 (a Friday) 10:00 UTC -> the next is Monday 2024-01-08 09:00 UTC.
/// assert_eq!(cron.next_after(1_704_448_800_000)?, 1_704_704_400_000);
/// assert!("0 0 9 * * *".parse::<Cron>().is_err()); // six fields: seconds are not taken
/// # Ok::<(), agentflow::schedule::CronError>(())
/// ```
#[derive(Clone)]
pub struct Cron {
    text: String,
    parsed: croner::Cron,
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cron").field(&self.text).finish()
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Cron {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Cron {}

/// A cron expression refused, or one that names no time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// Not a five-field cron expression.
    #[error("cron expression {expression:?} is not valid: {reason}; write {CRON_SYNTAX}")]
    Invalid {
        /// The expression given.
        expression: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A valid expression that names no time after `after` (e.g. `0 0 30 2 *`, February 30th).
    #[error(
        "cron expression {expression:?} names no time after unix ms {after}; choose days that exist (e.g. not February 30th)"
    )]
    NeverFires {
        /// The expression.
        expression: String,
        /// The instant searched from (unix millis).
        after: u64,
    },
}

impl Cron {
    /// Reads `expression` (see [`Cron`]).
    ///
    /// # Errors
    /// [`CronError::Invalid`] for anything but five fields (or a nickname) of valid values,
    /// saying what is wrong and the syntax.
    pub fn parse(expression: &str) -> Result<Cron, CronError> {
        let invalid = |reason: String| CronError::Invalid { expression: expression.to_string(), reason };
        if expression.len() > MAX_CRON_LEN {
            return Err(invalid(format!("it is {} bytes long, more than {MAX_CRON_LEN}", expression.len())));
        }
        let text = expression.trim();
        if text.is_empty() {
            return Err(invalid("it is empty".to_string()));
        }
        if let Some(nickname) = text.strip_prefix('@') {
            const NICKNAMES: [&str; 6] = ["hourly", "daily", "weekly", "monthly", "yearly", "annually"];
            if !NICKNAMES.iter().any(|n| n.eq_ignore_ascii_case(nickname)) {
                return Err(invalid(format!("`@{nickname}` is not a nickname taken here")));
            }
        } else {
            let fields = text.split_whitespace().count();
            if fields != 5 {
                let what = match fields {
                    6 => " (a seconds or a year field: a schedule fires at most once a minute)",
                    7 => " (seconds and year fields: a schedule fires at most once a minute)",
                    _ => "",
                };
                return Err(invalid(format!("it has {fields} fields, not 5{what}")));
            }
        }
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let parsed = parser.parse(text).map_err(|e| invalid(field_reason(&parser, text).unwrap_or(e.to_string())))?;
        Ok(Cron { text: text.to_string(), parsed })
    }

    /// The expression as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first time (unix millis, a whole minute) the expression names strictly after `after`
    /// (unix millis), in UTC.
    ///
    /// # Errors
    /// [`CronError::NeverFires`] if it names none (before the year 5000).
    pub fn next_after(&self, after: u64) -> Result<u64, CronError> {
        let never = || CronError::NeverFires { expression: self.text.clone(), after };
        let start = i64::try_from(after)
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .map(|t| t.naive_utc())
            .ok_or_else(never)?;
        // Not inclusive: an `after` that is itself a whole matching minute gives the next one.
        let next: NaiveDateTime = self.parsed.find_next_occurrence(&start, false).map_err(|_| never())?;
        u64::try_from(next.and_utc().timestamp_millis()).map_err(|_| never())
    }
}

impl FromStr for Cron {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cron::parse(s)
    }
}

/// The five fields: name, values.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 (0 and 7 are Sunday) or SUN-SAT"),
];

/// Which of the five fields of refused expression `text` is wrong and why: each field is read
/// alone, the others `*`. `None` for a nickname, or when each reads alone.
fn field_reason(parser: &CronParser, text: &str) -> Option<String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        return None;
    }
    fields.iter().zip(FIELDS).enumerate().find_map(|(i, (field, (name, values)))| {
        let alone: Vec<&str> = (0..FIELDS.len()).map(|j| if j == i { *field } else { "*" }).collect();
        let e = parser.parse(&alone.join(" ")).err()?;
        Some(format!("the {name} field `{field}` does not read ({e}); {name} values are {values}"))
    })
}

/// `at` (unix millis) as `YYYYMMDDTHHMMZ` in UTC (the minute it falls in), as a schedule's
/// threads are named; `None` past what a date can hold.
pub(crate) fn minute_stamp(at: u64) -> Option<String> {
    let t = DateTime::from_timestamp_millis(i64::try_from(at).ok()?)?.naive_utc();
    Some(format!("{:04}{:02}{:02}T{:02}{:02}Z", t.year(), t.month(), t.day(), t.hour(), t.minute()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-03-10 12:34:56.789 UTC.
    const T: u64 = 1_710_074_096_789;
    const MINUTE: u64 = 60_000;

    fn ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        let t = chrono::NaiveDate::from_ymd_opt(y, mo, d).unwrap().and_hms_opt(h, mi, 0).unwrap();
        u64::try_from(t.and_utc().timestamp_millis()).unwrap()
    }

    fn reason(expression: &str) -> String {
        match Cron::parse(expression) {
            Err(CronError::Invalid { reason, .. }) => reason,
            other => panic!("{expression:?} was read: {other:?}"),
        }
    }

    #[test]
    fn six_and_seven_fields_are_refused_naming_the_fields_and_the_syntax() {
        assert_eq!(
            reason("0 */5 * * * *"),
            "it has 6 fields, not 5 (a seconds or a year field: a schedule fires at most once a minute)"
        );
        assert!(reason("0 0 12 * * ? 2030").starts_with("it has 7 fields, not 5"));
        assert_eq!(reason("* * * *"), "it has 4 fields, not 5");
        let message = Cron::parse("0 */5 * * * *").unwrap_err().to_string();
        assert!(message.contains("minute hour day-of-month month day-of-week"), "{message}");
        assert!(message.contains("\"0 */5 * * * *\""), "{message}");
    }

    #[test]
    fn garbage_empty_and_out_of_range_values_are_refused() {
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason("   "), "it is empty");
        assert_eq!(reason("every day at noon"), "it has 4 fields, not 5");
        // Five fields, but not cron: the field named, with its values.
        assert_eq!(
            reason("61 * * * *"),
            "the minute field `61` does not read (Component error: Number out of bounds.); minute values are 0-59"
        );
        assert!(reason("every day at noon please").starts_with("the minute field `every` does not read"));
        assert!(reason("* 24 * * *").starts_with("the hour field `24`"));
        assert!(reason("* * 0 * *").starts_with("the day-of-month field `0`"));
        assert!(reason("* * * 13 *").starts_with("the month field `13`"));
        assert!(reason("* * * * 8").starts_with("the day-of-week field `8`"));
        assert!(reason("*/0 * * * *").contains("Step cannot be zero"));
        assert!(reason("1-x * * * *").contains("illegal character"));
        assert!(reason("@reboot").contains("@reboot"));
        assert!(reason(&"* ".repeat(120)).contains("more than 200"));
    }

    #[test]
    fn the_next_time_is_the_first_matching_minute_strictly_after_in_utc() {
        let every_15: Cron = "*/15 * * * *".parse().unwrap();
        assert_eq!(every_15.next_after(T).unwrap(), ms(2024, 3, 10, 12, 45));
        // A matching minute exactly: the next one, not itself.
        assert_eq!(every_15.next_after(ms(2024, 3, 10, 12, 45)).unwrap(), ms(2024, 3, 10, 13, 0));
        assert_eq!(every_15.next_after(ms(2024, 3, 10, 12, 45) - 1).unwrap(), ms(2024, 3, 10, 12, 45));
        let every_minute: Cron = "* * * * *".parse().unwrap();
        assert_eq!(every_minute.next_after(T).unwrap(), ms(2024, 3, 10, 12, 35));
        assert_eq!(every_minute.next_after(T).unwrap() % MINUTE, 0);
        // UTC, whatever the machine's zone: 02:30 every day, and across the month's end.
        let nightly: Cron = "30 2 * * *".parse().unwrap();
        assert_eq!(nightly.next_after(T).unwrap(), ms(2024, 3, 11, 2, 30));
        assert_eq!(nightly.next_after(ms(2024, 2, 29, 3, 0)).unwrap(), ms(2024, 3, 1, 2, 30));
        // Weekdays by name: 2024-03-10 is a Sunday.
        let weekdays: Cron = "0 9 * * MON-FRI".parse().unwrap();
        assert_eq!(weekdays.next_after(T).unwrap(), ms(2024, 3, 11, 9, 0));
        // Day-of-month OR day-of-week, as standard cron: the 15th, or a Friday.
        let either: Cron = "0 0 15 * 5".parse().unwrap();
        assert_eq!(either.next_after(T).unwrap(), ms(2024, 3, 15, 0, 0));
        assert_eq!(either.next_after(ms(2024, 3, 15, 0, 0)).unwrap(), ms(2024, 3, 22, 0, 0));
        // Leap day, yearly.
        let leap: Cron = "0 12 29 2 *".parse().unwrap();
        assert_eq!(leap.next_after(T).unwrap(), ms(2028, 2, 29, 12, 0));
        let daily: Cron = "@daily".parse().unwrap();
        assert_eq!(daily.next_after(T).unwrap(), ms(2024, 3, 11, 0, 0));
        assert_eq!(daily.as_str(), "@daily");
    }

    #[test]
    fn an_expression_that_names_no_day_never_fires() {
        let feb30: Cron = "0 0 30 2 *".parse().unwrap();
        assert!(matches!(feb30.next_after(T), Err(CronError::NeverFires { after: T, .. })));
    }

    #[test]
    fn threads_are_stamped_with_the_utc_minute() {
        assert_eq!(minute_stamp(T).unwrap(), "20240310T1234Z");
        assert_eq!(minute_stamp(0).unwrap(), "19700101T0000Z");
        assert_eq!(minute_stamp(u64::MAX), None);
    }
}
