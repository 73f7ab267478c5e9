//! Form bodies (`application/x-www-form-urlencoded`), decoded strictly and within
//! bounds, and their canonical order as Twilio signs them (`{form_sorted}`).

use super::{MAX_FORM_PARAMS, count_work};

/// Why a form body has no parameters to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormError {
    /// More than [`MAX_FORM_PARAMS`] parameters.
    TooManyParameters,
    /// A decoded name or value is not UTF-8.
    NotUtf8,
}

/// Decode an `application/x-www-form-urlencoded` string: `&`-separated `name=value`
/// pairs, `+` for a space, `%XX` escapes (a malformed escape is kept literally, as
/// form parsers do). Refused when a decoded name or value is not UTF-8 (such a body
/// has no unambiguous parameters to verify) or when it holds more than
/// [`MAX_FORM_PARAMS`] parameters (counted before anything is decoded).
///
/// Not `form_urlencoded::parse`: it decodes lossily (invalid UTF-8 becomes U+FFFD),
/// so a body that is not UTF-8 could not be refused.
pub fn parse_form(bytes: &[u8]) -> Result<Vec<(String, String)>, FormError> {
    let pairs = bytes
        .split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .take(MAX_FORM_PARAMS + 1)
        .count();
    if pairs > MAX_FORM_PARAMS {
        return Err(FormError::TooManyParameters);
    }
    let mut out = Vec::with_capacity(pairs);
    for pair in bytes.split(|b| *b == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let decode = |c| decode_component(c).ok_or(FormError::NotUtf8);
        out.push((decode(name)?, decode(value)?));
    }
    Ok(out)
}

fn decode_component(s: &[u8]) -> Option<String> {
    fn hex_val(b: &u8) -> Option<u8> {
        (*b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => match (
                s.get(i + 1).and_then(hex_val),
                s.get(i + 2).and_then(hex_val),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The distinct form parameters in canonical order (by name, then value, by code
/// point, as Twilio's validators sort), as indexes into `pairs`.
pub(super) fn sorted_form(pairs: &[(String, String)]) -> Vec<usize> {
    count_work(|w| w.form_builds += 1);
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_unstable_by(|a, b| pairs[*a].cmp(&pairs[*b]));
    order.dedup_by(|a, b| pairs[*a] == pairs[*b]);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_strictly() {
        assert_eq!(
            parse_form(b"a=1&b=x+y%2B%zz&&c&a=2").unwrap(),
            [
                ("a".to_string(), "1".to_string()),
                ("b".into(), "x y+%zz".into()),
                ("c".into(), String::new()),
                ("a".into(), "2".into()),
            ]
        );
        assert_eq!(parse_form(b"a=%FF"), Err(FormError::NotUtf8));
        assert_eq!(parse_form(b"").unwrap(), []);
        let at_cap = vec!["a=1"; MAX_FORM_PARAMS].join("&");
        assert_eq!(
            parse_form(at_cap.as_bytes()).unwrap().len(),
            MAX_FORM_PARAMS
        );
        let over = format!("{at_cap}&b");
        assert_eq!(
            parse_form(over.as_bytes()),
            Err(FormError::TooManyParameters)
        );
    }
}
