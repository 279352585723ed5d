//! Object metadata shared by every resource, in the Kubernetes shape.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The API group and version of every joch resource.
pub const API_VERSION: &str = "joch.dev/v1alpha1";

/// `metadata` of a resource. `uid`, `resourceVersion` and `creationTimestamp`
/// are set by the server; whatever a client sends in them is ignored on create.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    /// Unique within the namespace and kind. For a ToolCall this is the call id.
    #[serde(default)]
    pub name: String,
    /// The tenant the resource belongs to.
    #[serde(default)]
    pub namespace: String,
    /// Unguessable id, fixed at creation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Opaque version, changed by every write; a replace must carry the current one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// When the server first stored the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Free-form labels, matched by `labelSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form annotations, never interpreted by joch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A reference to another resource by name, as in `toolRef: {name: ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    /// Name of the referenced resource.
    pub name: String,
}

impl ObjectRef {
    /// A reference to `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

/// A UTC instant, rendered as RFC 3339 with millisecond precision
/// (`2026-05-10T10:35:00.000Z`) so that records round-trip byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub DateTime<Utc>);

impl Time {
    /// Milliseconds from `self` to `later`, never negative.
    pub fn millis_until(self, later: Time) -> u64 {
        u64::try_from((later.0 - self.0).num_milliseconds()).unwrap_or(0)
    }

    /// `self` plus `d`, or `None` past year 9999: beyond it a time no longer
    /// renders as RFC 3339, so a record holding it could not be read back.
    /// Never panics, whatever `d` a client or a stored record gave.
    pub fn checked_add(self, d: std::time::Duration) -> Option<Time> {
        let d = chrono::TimeDelta::from_std(d).ok()?;
        self.0.checked_add_signed(d).map(Time).filter(Time::renders)
    }

    /// `self` minus `d`, or `None` before year 0 (see [`checked_add`](Self::checked_add)).
    pub fn checked_sub(self, d: std::time::Duration) -> Option<Time> {
        let d = chrono::TimeDelta::from_std(d).ok()?;
        self.0.checked_sub_signed(d).map(Time).filter(Time::renders)
    }

    fn renders(&self) -> bool {
        (0..=9999).contains(&chrono::Datelike::year(&self.0))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| Time(t.with_timezone(&Utc)))
            .map_err(serde::de::Error::custom)
    }
}

/// Parses `500ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 5m or 1h"))?;
    let millis = match unit {
        "ms" => number,
        "" | "s" => number.saturating_mul(1_000),
        "m" => number.saturating_mul(60_000),
        "h" => number.saturating_mul(3_600_000),
        _ => return Err(format!("{text:?}: unit must be ms, s, m or h")),
    };
    Ok(std::time::Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trips_with_millis() {
        let t: Time = serde_json::from_str("\"2026-05-10T12:35:00.123+02:00\"").unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-05-10T10:35:00.123Z\""
        );
    }

    #[test]
    fn time_arithmetic_is_checked_and_stays_renderable() {
        use std::time::Duration;
        let t: Time = serde_json::from_str("\"2026-05-10T10:35:00.000Z\"").unwrap();
        let later = t.checked_add(Duration::from_secs(60)).unwrap();
        assert_eq!(later.to_string(), "2026-05-10T10:36:00.000Z");
        assert_eq!(later.checked_sub(Duration::from_secs(60)), Some(t));
        for huge in [
            Duration::from_secs(10_000_000_000_000),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
            Duration::from_secs(8_000 * 366 * 86_400),
        ] {
            assert_eq!(t.checked_add(huge), None, "{huge:?}");
            assert_eq!(t.checked_sub(huge), None, "{huge:?}");
        }
        let far = t
            .checked_add(Duration::from_secs(7_000 * 365 * 86_400))
            .unwrap();
        let back: Time = serde_json::from_str(&serde_json::to_string(&far).unwrap()).unwrap();
        assert_eq!(back, far, "the latest time accepted still round-trips");
    }

    #[test]
    fn unknown_metadata_fields_are_refused() {
        let err = serde_json::from_str::<ObjectMeta>(r#"{"name":"a","nmae":"b"}"#).unwrap_err();
        assert!(err.to_string().contains("nmae"), "{err}");
    }
}
