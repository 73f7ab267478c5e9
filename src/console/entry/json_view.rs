//! The JSON view of a body on an entry's page: indented two spaces a level, every
//! token kept as it was written (key order, number forms, escapes), and bounded.
//!
//! Indenting costs output per level: a 1 MiB body nested 120 deep is ~127 MB once
//! every line carries its indentation, and building that before cutting it to the
//! page's share made four concurrent views of one entry outgrow a 256 Mi pod. So the
//! view is written while the body is scanned, into a [`Capped`] buffer that stops at
//! the shown size of the *output*, and levels deeper than [`MAX_INDENTED_DEPTH`] are
//! written compact. A view costs at most the shown size, whatever the body.

/// Levels deeper than this are written compact (no line breaks, no indentation).
pub const MAX_INDENTED_DEPTH: usize = 32;

/// The view of a body: its beginning, and whether the rest was cut.
#[derive(Debug, PartialEq, Eq)]
pub struct Shown {
    pub text: String,
    pub cut: bool,
}

/// The buffer is full: what was written so far is the view.
struct Full;

/// A buffer that takes at most `max` bytes, cut at a character boundary.
struct Capped {
    out: String,
    max: usize,
}

impl Capped {
    fn push(&mut self, s: &str) -> Result<(), Full> {
        let room = self.max - self.out.len();
        if s.len() <= room {
            self.out.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.out.push_str(&s[..end]);
        Err(Full)
    }

    fn push_char(&mut self, c: char) -> Result<(), Full> {
        self.push(c.encode_utf8(&mut [0; 4]))
    }

    /// A line break and the indentation of `depth`, unless `depth` is written compact.
    fn newline(&mut self, depth: usize) -> Result<(), Full> {
        if depth > MAX_INDENTED_DEPTH {
            return Ok(());
        }
        self.push("\n")?;
        (0..depth).try_for_each(|_| self.push("  "))
    }
}

/// `text` indented when it is JSON, at most `max` bytes of it; `None` when it is not
/// JSON (checked first without building anything: serde's `IgnoredAny`).
pub fn json_indented(text: &str, max: usize) -> Option<Shown> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let mut view = Capped {
        out: String::with_capacity(max.min(text.len() + text.len() / 4)),
        max,
    };
    let cut = indent(text, &mut view).is_err();
    Some(Shown {
        text: view.out,
        cut,
    })
}

/// Write `text` (valid JSON) indented into `out` until it is full.
fn indent(text: &str, out: &mut Capped) -> Result<(), Full> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push_char(c)?;
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push_char(c)?;
            }
            '{' | '[' => {
                out.push_char(c)?;
                // An empty object or array stays on one line.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push_char(close)?;
                    }
                } else {
                    depth += 1;
                    out.newline(depth)?;
                }
            }
            '}' | ']' => {
                let inner = depth;
                depth = depth.saturating_sub(1);
                if inner <= MAX_INDENTED_DEPTH {
                    out.newline(depth)?;
                }
                out.push_char(c)?;
            }
            ',' => {
                out.push_char(c)?;
                out.newline(depth)?;
            }
            ':' if depth > MAX_INDENTED_DEPTH => out.push_char(':')?,
            ':' => out.push(": ")?,
            c if c.is_whitespace() => {}
            c => out.push_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str) -> Option<String> {
        json_indented(text, usize::MAX / 2).map(|s| {
            assert!(!s.cut);
            s.text
        })
    }

    #[test]
    fn json_is_indented_token_for_token() {
        let text = r#"{"b":1.50,"a":[1, {"x":"a,b{c}\"d"}],"e":{},"f":[ ]}"#;
        assert_eq!(
            whole(text).unwrap(),
            "{\n  \"b\": 1.50,\n  \"a\": [\n    1,\n    {\n      \"x\": \"a,b{c}\\\"d\"\n    }\n  ],\n  \"e\": {},\n  \"f\": []\n}"
        );
        assert_eq!(whole("not json"), None);
        assert_eq!(whole("{\"a\":1"), None);
    }

    #[test]
    fn the_view_stops_at_its_size_on_a_character() {
        let shown = json_indented(r#"{"a":"héllo"}"#, 11).unwrap();
        // `{\n  "a": "h` is 11 bytes; `é` would not fit whole.
        assert_eq!(shown.text, "{\n  \"a\": \"h");
        assert!(shown.cut);
        let shown = json_indented(r#"{"a":"héllo"}"#, 12).unwrap();
        assert_eq!(shown.text, "{\n  \"a\": \"h");
        assert!(shown.cut);
    }

    #[test]
    fn deep_levels_are_written_compact() {
        let depth = MAX_INDENTED_DEPTH + 3;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let text = text.replacen("[]", "[{\"k\":1,\"l\":2}]", 1);
        let pretty = whole(&text).unwrap();
        let widest = pretty.lines().map(str::len).max().unwrap_or(0);
        assert!(widest <= 2 * MAX_INDENTED_DEPTH + 40, "{pretty}");
        assert!(pretty.contains("[[[{\"k\":1,\"l\":2}]]]"), "{pretty}");
        assert!(pretty.ends_with("\n]"), "{pretty}");
    }
}
