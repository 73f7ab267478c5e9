//! A console form's body: `application/x-www-form-urlencoded`, as a browser sends an
//! HTML form, read into its fields. Anything else is refused (a form the console
//! rendered never sends anything else).

use axum::http::{HeaderMap, header};

use super::ConsoleError;

/// The fields of a submitted form, in order.
#[derive(Debug, Default)]
pub struct Form(Vec<(String, String)>);

impl Form {
    /// Read `body`, which `headers` must say is a URL-encoded form.
    pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Form, ConsoleError> {
        let is_form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !is_form {
            return Err(ConsoleError::BadForm("not a form submission"));
        }
        Ok(Form(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        ))
    }

    /// The first value of field `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_url_encoded_forms_are_read() {
        let mut h = HeaderMap::new();
        assert!(Form::parse(&h, b"a=1").is_err());
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(Form::parse(&h, b"a=1").is_err());
        h.insert(
            header::CONTENT_TYPE,
            "Application/X-WWW-Form-URLEncoded; charset=utf-8"
                .parse()
                .unwrap(),
        );
        let f = Form::parse(&h, b"token=a%2Bb+c&csrf=x&token=second").unwrap();
        assert_eq!(f.get("token"), Some("a+b c"));
        assert_eq!(f.get("csrf"), Some("x"));
        assert_eq!(f.get("missing"), None);
    }
}
