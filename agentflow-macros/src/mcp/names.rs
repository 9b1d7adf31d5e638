//! MCP names -> Rust names: `get-sum` -> `get_sum` (the tool item) and `GetSumArgs` (its
//! argument struct); `messageType` -> `message_type` (a field). Pure string work.

/// Rust's keywords: a name that is one is written as a raw identifier (`r#type`).
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "do", "dyn", "else", "enum",
    "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move",
    "mut", "override", "priv", "pub", "ref", "return", "static", "struct", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Keywords that cannot be raw identifiers: they get a `_` after them (`self_`).
const NOT_RAW: &[&str] = &["crate", "self", "Self", "super", "_"];

/// The words of a name: split at anything that is not a letter or digit, and where a lower
/// case letter or digit is followed by an upper case one (`getSum` -> `get`, `Sum`;
/// `HTTPServer` -> `HTTP`, `Server`).
fn words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let boundary = c.is_uppercase()
            && !word.is_empty()
            && (prev.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit())
                || (prev.is_some_and(char::is_uppercase) && next.is_some_and(char::is_lowercase)));
        if boundary {
            out.push(std::mem::take(&mut word));
        }
        word.push(c);
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Keeps only what an identifier may hold (ASCII letters, digits, `_`).
fn ascii(word: &str) -> String {
    word.chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}

/// `get-sum` -> `get_sum`, `messageType` -> `message_type`, `3d` -> `_3d`, `""` -> `_unnamed`.
/// Keywords stay as they are (see [`ident_text`] for how they are written).
pub fn snake(name: &str) -> String {
    let joined =
        words(name).iter().map(|w| ascii(w).to_lowercase()).filter(|w| !w.is_empty()).collect::<Vec<_>>().join("_");
    if joined.is_empty() {
        "_unnamed".to_string()
    } else if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// `get-sum` -> `GetSum`, `message_type` -> `MessageType`.
pub fn pascal(name: &str) -> String {
    let joined: String = words(name)
        .iter()
        .map(|w| {
            let w = ascii(w).to_lowercase();
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    if joined.is_empty() {
        "Unnamed".to_string()
    } else if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("T{joined}")
    } else {
        joined
    }
}

/// How an identifier is written: `r#type` for a keyword, `self_` for one that cannot be raw,
/// the name itself otherwise.
pub fn ident_text(name: &str) -> String {
    if NOT_RAW.contains(&name) {
        format!("{name}_")
    } else if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    }
}

/// The name an identifier the user wrote stands for: `r#type` -> `type`.
pub fn unraw(ident: &str) -> &str {
    ident.strip_prefix("r#").unwrap_or(ident)
}

/// `name` made unique among `taken` by a number after it (`Lines2`), then added to `taken`.
pub fn unique(name: String, taken: &mut Vec<String>) -> String {
    let mut out = name.clone();
    let mut n = 2;
    while taken.contains(&out) {
        out = format!("{name}{n}");
        n += 1;
    }
    taken.push(out.clone());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_become_snake_case_items_and_pascal_case_structs() {
        assert_eq!(snake("get-sum"), "get_sum");
        assert_eq!(pascal("get-sum"), "GetSum");
        assert_eq!(snake("trigger-long-running-operation"), "trigger_long_running_operation");
        assert_eq!(snake("files.read file"), "files_read_file");
        assert_eq!(snake("getSum"), "get_sum");
        assert_eq!(pascal("getSum"), "GetSum");
        assert_eq!(snake("HTTPServer"), "http_server");
        assert_eq!(snake("get_v2Items"), "get_v2_items");
        assert_eq!(snake("already_snake"), "already_snake");
        assert_eq!(pascal("message_type"), "MessageType");
    }

    #[test]
    fn names_that_are_no_identifier_are_made_one() {
        assert_eq!(snake("3d-render"), "_3d_render");
        assert_eq!(pascal("3d-render"), "T3dRender");
        assert_eq!(snake("--"), "_unnamed");
        assert_eq!(snake("@id"), "id");
        assert_eq!(snake("héllo"), "hllo");
    }

    #[test]
    fn keywords_are_written_as_raw_identifiers() {
        assert_eq!(ident_text("type"), "r#type");
        assert_eq!(ident_text("async"), "r#async");
        assert_eq!(ident_text("self"), "self_");
        assert_eq!(ident_text("count"), "count");
        assert_eq!(unraw("r#type"), "type");
        assert_eq!(unraw("count"), "count");
    }

    #[test]
    fn clashing_names_get_a_number() {
        let mut taken = vec!["Lines".to_string()];
        assert_eq!(unique("Lines".into(), &mut taken), "Lines2");
        assert_eq!(unique("Lines".into(), &mut taken), "Lines3");
        assert_eq!(unique("Other".into(), &mut taken), "Other");
    }
}
