//! AWS SNS subscriptions confirmed by the gateway (`confirm_subscriptions = true`).
//!
//! SNS sends a `SubscriptionConfirmation` to a new HTTP/S subscription and delivers
//! nothing until someone visits its `SubscribeURL`. By default that message is
//! stored and delivered like a notification, and the app (or an operator) confirms.
//! A source may ask the gateway to confirm instead: once the message verified (its
//! signature, and its `TopicArn` one of the source's), the gateway GETs the
//! `SubscribeURL`, and only then stores the message and answers 200. If the visit
//! fails, nothing is stored and SNS is answered 503, so that it sends the
//! confirmation again.
//!
//! The URL is checked before it is visited, since the signature covers it but a
//! confirmation for someone else's topic must not make the gateway call anywhere:
//! `https://` on the spec's certificate hosts (`sns.<region>.amazonaws.com`), the
//! default port, path `/`, and a query with `Action=ConfirmSubscription`, a `Token`,
//! and the message's own `TopicArn`. The spec's `fetch_base` (tests, loopback)
//! replaces the origin visited, as it does for certificates.

use crate::error::ApiError;
use crate::provider::certificate::{FETCH_TIMEOUT, https_on_hosts};
use crate::provider::spec::CertificateRule;

/// The most of SNS's answer read (its `ConfirmSubscriptionResponse` is ~400 bytes).
const MAX_ANSWER: usize = 64 * 1024;

/// The `Type` of the messages confirmed.
pub(super) const CONFIRMATION: &str = "SubscriptionConfirmation";

/// Why a confirmation was not made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfirmError {
    /// The message has no usable `SubscribeURL`, or it is not one SNS would send.
    #[error("the SubscribeURL is missing or not an SNS confirmation URL")]
    Refused,
}

/// The URL to visit for the confirmation `body` (already verified): its
/// `SubscribeURL` once checked, on `rule.fetch_base` when the spec sets one.
pub fn subscribe_url(rule: &CertificateRule, body: &[u8]) -> Result<String, ConfirmError> {
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| ConfirmError::Refused)?;
    let text = |key: &str| json.get(key).and_then(|v| v.as_str());
    let (Some(named), Some(topic)) = (text("SubscribeURL"), text("TopicArn")) else {
        return Err(ConfirmError::Refused);
    };
    if named.len() > 4096 {
        return Err(ConfirmError::Refused);
    }
    let uri: http::Uri = named.parse().map_err(|_| ConfirmError::Refused)?;
    if !https_on_hosts(&uri, &rule.hosts) || uri.path() != "/" {
        return Err(ConfirmError::Refused);
    }
    let query = uri.query().ok_or(ConfirmError::Refused)?;
    let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let one = |key: &str| {
        let mut values = params.iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        match (values.next(), values.next()) {
            (Some(v), None) => Some(v.as_str()),
            _ => None,
        }
    };
    if one("Action") != Some("ConfirmSubscription")
        || one("TopicArn") != Some(topic)
        || one("Token").is_none_or(str::is_empty)
    {
        return Err(ConfirmError::Refused);
    }
    Ok(match &rule.fetch_base {
        Some(base) => format!("{base}/?{query}"),
        None => named.to_string(),
    })
}

/// Confirm the subscription of the verified `body`: visit its `SubscribeURL`.
/// `Unverified` when the URL is not one SNS sends; 503 when the visit fails.
pub(super) async fn confirm(
    client: &reqwest::Client,
    rule: &CertificateRule,
    source: &str,
    body: &[u8],
) -> Result<(), ApiError> {
    use futures_util::StreamExt as _;
    let url = subscribe_url(rule, body)
        .map_err(|_| ApiError::Unverified(crate::provider::verify::VerifyError::SubscribeUrl))?;
    let unconfirmed = |cause: String| {
        tracing::warn!(source, error = %cause, "SNS subscription not confirmed");
        ApiError::SubscriptionUnconfirmed(cause)
    };
    let resp = tokio::time::timeout(FETCH_TIMEOUT, client.get(&url).send())
        .await
        .map_err(|_| unconfirmed("timed out".into()))?
        .map_err(|e| unconfirmed(e.without_url().to_string()))?;
    let status = resp.status();
    // Read (a bounded part of) the answer, so that the connection is reusable.
    let mut stream = resp.bytes_stream();
    let mut read = 0usize;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) if read + c.len() <= MAX_ANSWER => read += c.len(),
            _ => break,
        }
    }
    if !status.is_success() {
        return Err(unconfirmed(format!(
            "SNS answered HTTP {}",
            status.as_u16()
        )));
    }
    tracing::info!(source, "SNS subscription confirmed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::certificate::sns_rule;

    const TOPIC: &str = "arn:aws:sns:us-west-2:123456789012:MyTopic";

    fn body(url: &str) -> Vec<u8> {
        serde_json::json!({"Type": CONFIRMATION, "TopicArn": TOPIC, "SubscribeURL": url})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn only_sns_confirmation_urls_of_the_message_topic_are_visited() {
        // The form of the AWS documentation's example confirmation.
        let good = format!(
            "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37"
        );
        assert_eq!(
            subscribe_url(&sns_rule(None), &body(&good)),
            Ok(good.clone())
        );
        assert_eq!(
            subscribe_url(&sns_rule(Some("http://127.0.0.1:9")), &body(&good)),
            Ok(format!(
                "http://127.0.0.1:9/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=2336412f37"
            ))
        );
        let cn = format!(
            "https://sns.cn-north-1.amazonaws.com.cn/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"
        );
        assert!(subscribe_url(&sns_rule(None), &body(&cn)).is_ok());
        for bad in [
            // Another host, scheme, port, path; userinfo; another action or topic;
            // no token; a parameter twice.
            format!("https://sns.us-west-2.amazonaws.com.evil.example/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            format!("http://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            format!("https://sns.us-west-2.amazonaws.com:8443/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            format!("https://sns.us-west-2.amazonaws.com/x?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            format!("https://a@sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            format!("https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&TopicArn={TOPIC}&Token=t"),
            "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-west-2:1:Other&Token=t".to_string(),
            format!("https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn={TOPIC}"),
            format!("https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&Action=ConfirmSubscription&TopicArn={TOPIC}&Token=t"),
            "not a url".to_string(),
        ] {
            assert_eq!(
                subscribe_url(&sns_rule(None), &body(&bad)),
                Err(ConfirmError::Refused),
                "{bad}"
            );
        }
        assert_eq!(
            subscribe_url(&sns_rule(None), br#"{"Type":"SubscriptionConfirmation"}"#),
            Err(ConfirmError::Refused)
        );
    }
}
