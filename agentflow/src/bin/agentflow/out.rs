//! Output: aligned tables for people, JSON for scripts, and the clock and durations the
//! commands read (times and values are shown by the library's `agentflow::server::inspect::display`).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::{Failure, Outcome};

/// Unix millis now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Writes one line, `args`, to standard output, the one way commands print (through
/// `outln!`, which adds the line's end), with every character that could forge or hide what is
/// shown written escaped ([`printable_line`]): a newline or tab inside a thread id or a text
/// cannot start a row of its own.
///
/// A reader that stopped reading (`agentflow audit | head -1`: a closed pipe) ends the command
/// quietly with success ([`Failure::output_closed`]), as a tool killed by `SIGPIPE` would; any
/// other write error is a usage failure saying so.
pub fn write(args: std::fmt::Arguments<'_>) -> Outcome {
    let raw = args.to_string();
    let mut text = printable_line(&raw).into_owned();
    text.push('\n');
    write_bytes(text.as_bytes())
}

/// Writes `text`, lines of the command's own making (pretty JSON, whose strings JSON has
/// escaped already; a graph's drawing), with the characters [`printable`] escapes escaped.
pub fn write_block(text: &str) -> Outcome {
    write_bytes(printable(text).as_bytes())
}

/// Whether `c` is drawn as nothing, or moves or reorders what follows it: Unicode format
/// characters (direction marks, embeddings, overrides and isolates, zero-width spaces and
/// joiners, the byte-order mark, tags), the soft hyphen, and the line and paragraph separators.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD | 0x61C
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

/// Appends `c` as JSON's escape (`\u001b`; a surrogate pair past U+FFFF), so escaped text in a
/// JSON string reads back as the same character.
fn push_escape(out: &mut String, c: char) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

fn escaped(text: &str, escape: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' if escape(c) => out.push_str("\\n"),
            '\t' if escape(c) => out.push_str("\\t"),
            c if escape(c) => push_escape(&mut out, c),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with every control character but newline and tab, and every format character
/// (right-to-left override, isolates, zero-width characters), written as an escape
/// (`\u001b`, `\u202e`, as JSON writes one, so JSON output stays JSON that reads back the
/// same): a thread id, a payload or a model's text printed to a terminal cannot move its
/// cursor, clear it, retitle it, hide what follows or show it reordered.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| (c.is_control() && c != '\n' && c != '\t') || is_format(c))
}

/// [`printable`], with newlines and tabs escaped too (`\n`, `\t`): for one line or one table
/// cell, which stored text must not break into two or shift.
pub fn printable_line(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| c.is_control() || is_format(c))
}

/// Writes `bytes` to standard output, as [`write`] does.
pub fn write_bytes(bytes: &[u8]) -> Outcome {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(write_failure)
}

/// The failure of a write to standard output.
fn write_failure(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Failure::output_closed();
    }
    Failure::usage(format!(
        "cannot write to standard output: {e}; check where the output goes (a full disk, a closed terminal) and run the command again"
    ))
}

/// Prints `value` as pretty JSON on stdout.
pub fn json(value: &Value) -> Outcome {
    write_block(&format!("{}\n", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())))
}

/// Prints a table: a header row, then the rows, each column padded to its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> Outcome {
    // Escaped before the columns are measured, as they will be printed.
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|cell| printable_line(cell).into_owned()).collect()).collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                s.push_str(&cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                s.push_str(&cell);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        outln!("{}", s.trim_end())
    };
    line(header.iter().map(|h| h.to_string()).collect())?;
    for row in rows {
        line(row.clone())?;
    }
    Ok(())
}

/// Parses a duration: a number and a unit (`500ms`, `30s`, `5m`, `2h`, `3d`), in millis.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("`{text}` is not a duration: write a number and a unit, like 30m"))?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{text}`: the unit must be ms, s, m, h or d")),
    };
    Ok(n.saturating_mul(factor))
}

/// Parses a JSON argument; bad JSON is a usage error naming the option.
pub fn parse_json(option: &str, text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| Failure::usage(format!("{option} is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_printed_escaped() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(printable("\u{1b}[2J\u{1b}]0;pwned\u{7}"), "\\u001b[2J\\u001b]0;pwned\\u0007");
        assert_eq!(printable("a\u{9b}b\rc"), "a\\u009bb\\u000dc");
        // In a JSON string (serde_json leaves C1 controls as they are), the escape is JSON's own.
        let json = serde_json::to_string(&serde_json::json!({ "t": "x\u{85}y" })).unwrap();
        let shown: serde_json::Value = serde_json::from_str(&printable(&json)).unwrap();
        assert_eq!(shown["t"], "x\u{85}y");
    }

    #[test]
    fn newlines_tabs_and_format_characters_are_escaped_in_a_line() {
        let hostile = "a\nb\tc\u{202E}d\u{2066}e\u{200B}f\u{E0041}";
        let line = printable_line(hostile);
        assert_eq!(line, "a\\nb\\tc\\u202ed\\u2066e\\u200bf\\udb40\\udc41");
        // As JSON escapes, it reads back as the same text.
        assert_eq!(serde_json::from_str::<String>(&format!("\"{line}\"")).unwrap(), hostile);
        // Blocks keep their own line breaks; format characters are escaped there too.
        assert_eq!(printable("x\n\u{202E}y"), "x\n\\u202ey");
        assert_eq!(printable("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("5w").is_err());
    }
}
