//! Telling people apart by name.

/// The key two names of one person share: the name without invisible characters (zero-width
/// spaces and joiners, direction marks), lowercased, as its confusable skeleton (Unicode
/// Technical Standard #39), lowercased again. `alice`, `Alice`, `аlice` (a Cyrillic a),
/// `ａｌｉｃｅ` (fullwidth) and `al\u{200D}ice` have one key. The approval inbox refuses a users
/// file with two names of one key, and the two-person rule counts one person per key.
pub fn person_key(name: &str) -> String {
    let visible: String = name.chars().filter(|c| !invisible(*c)).flat_map(char::to_lowercase).collect();
    unicode_security::skeleton(&visible).flat_map(char::to_lowercase).collect()
}

/// Default-ignorable code points (drawn as nothing): they tell no two names apart.
fn invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD | 0x34F
            | 0x61C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alike_names_share_a_key_and_distinct_ones_do_not() {
        let alice = person_key("alice");
        for alike in [
            "Alice",
            "ALICE",
            "\u{430}lice",
            "\u{FF41}\u{FF4C}\u{FF49}\u{FF43}\u{FF45}",
            "al\u{200D}ice",
            "\u{200B}alice",
        ] {
            assert_eq!(person_key(alike), alice, "{alike:?}");
        }
        assert_eq!(person_key("b\u{3BF}b"), person_key("bob"), "a Greek omicron");
        for other in ["alicia", "bob", "allce"] {
            assert_ne!(person_key(other), alice, "{other}");
        }
    }
}
