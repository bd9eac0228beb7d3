//! Reading the server's replies: field/value lists by field name (a RESP3 map
//! or a RESP2 flat array, extra fields tolerated), integers, text, and JSON.

use redis::Value;
use serde_json::json;

/// The fields of a reply such as `LOCK.INFO`'s, in the order received.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields(pub Vec<(String, Value)>);

impl Fields {
    /// A map (RESP3) or a flat field, value, ... array (RESP2); `None` for
    /// nil or anything else.
    pub fn parse(v: &Value) -> Option<Fields> {
        match v {
            Value::Map(pairs) => Some(Fields(
                pairs
                    .iter()
                    .map(|(k, v)| (text(k).unwrap_or_default(), v.clone()))
                    .collect(),
            )),
            Value::Array(items) if items.len() % 2 == 0 => Some(Fields(
                items
                    .chunks(2)
                    .map(|p| (text(&p[0]).unwrap_or_default(), p[1].clone()))
                    .collect(),
            )),
            Value::Attribute { data, .. } => Fields::parse(data),
            _ => None,
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(int)
    }

    pub fn text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(text)
    }

    /// A nested map (`readers`, `keepalive_clients`).
    pub fn map(&self, name: &str) -> Option<Fields> {
        self.get(name).and_then(Fields::parse)
    }

    /// Every field as JSON, nested maps as objects; `waits_for` (`LOCK.WAITERS`: the owners
    /// a waiter waits for) is a list, even of an even length.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v, k != "waits_for")))
            .collect()
    }
}

/// Text of a bulk, simple or verbatim string (lossy UTF-8), or an integer.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// An integer reply, or a string holding one.
pub fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Double(d) if d.fract() == 0.0 => Some(*d as i64),
        other => text(other).and_then(|t| t.trim().parse().ok()),
    }
}

/// The elements of an array or set reply (nothing for nil).
pub fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

/// A list of field/value entries (`LOCK.WAITERS`, `LOCK.QUEUES`).
pub fn entries(v: &Value) -> Vec<Fields> {
    items(v).iter().filter_map(Fields::parse).collect()
}

/// JSON for a reply value. `maps`: a nested even-length array is a RESP2 map
/// (as every nested array in `LOCK.INFO` is).
pub fn to_json(v: &Value, maps: bool) -> serde_json::Value {
    match v {
        Value::Nil => serde_json::Value::Null,
        Value::Int(i) => json!(i),
        Value::Double(d) => json!(d),
        Value::Boolean(b) => json!(b),
        Value::Map(_) => {
            serde_json::Value::Object(Fields::parse(v).map(|f| f.to_json()).unwrap_or_default())
        }
        Value::Array(items) if maps && items.len() % 2 == 0 => {
            serde_json::Value::Object(Fields::parse(v).map(|f| f.to_json()).unwrap_or_default())
        }
        Value::Array(items) | Value::Set(items) => {
            serde_json::Value::Array(items.iter().map(|i| to_json(i, maps)).collect())
        }
        Value::Attribute { data, .. } => to_json(data, maps),
        other => text(other).map_or(serde_json::Value::Null, serde_json::Value::String),
    }
}

/// An acquire's reply: `None` when not acquired (nil), else the hold count or
/// token per name (one for a single name, an array for `LOCK.MACQUIRE`).
pub fn acquired(v: &Value) -> Result<Option<Vec<i64>>, String> {
    redis_lock_client::proto::acquired(v).map_err(|_| format!("unexpected reply {v:?}"))
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    pub fn flat(pairs: &[(&str, Value)]) -> Value {
        Value::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [bulk(k), v.clone()])
                .collect(),
        )
    }

    #[test]
    fn resp2_and_resp3_alike() {
        let resp2 = flat(&[
            ("owner", bulk("a")),
            ("holds", Value::Int(2)),
            ("new", Value::Nil),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("owner"), bulk("a")),
            (bulk("holds"), Value::Int(2)),
            (Value::SimpleString("new".into()), Value::Nil),
        ]);
        for v in [resp2, resp3] {
            let f = Fields::parse(&v).expect("fields");
            assert_eq!(f.text("owner").as_deref(), Some("a"));
            assert_eq!(f.int("holds"), Some(2));
            assert_eq!(f.get("new"), Some(&Value::Nil));
            assert_eq!(f.int("missing"), None);
        }
        assert_eq!(Fields::parse(&Value::Nil), None);
        assert_eq!(Fields::parse(&Value::Array(vec![bulk("odd")])), None);
    }

    #[test]
    fn json_of_an_info_reply() {
        let v = flat(&[
            ("mode", bulk("read")),
            (
                "readers",
                flat(&[("r1", Value::Int(1)), ("r2", Value::Int(2))]),
            ),
            ("ttl", Value::Int(900)),
        ]);
        let f = Fields::parse(&v).expect("fields");
        assert_eq!(
            serde_json::Value::Object(f.to_json()),
            json!({"mode": "read", "readers": {"r1": 1, "r2": 2}, "ttl": 900})
        );
    }

    #[test]
    fn acquire_replies() {
        assert_eq!(acquired(&Value::Nil), Ok(None));
        assert_eq!(acquired(&Value::Int(1)), Ok(Some(vec![1])));
        assert_eq!(
            acquired(&Value::Array(vec![Value::Int(5), Value::Int(6)])),
            Ok(Some(vec![5, 6]))
        );
        assert!(acquired(&bulk("x")).is_err());
    }

    #[test]
    fn integers_from_strings() {
        assert_eq!(int(&bulk("42")), Some(42));
        assert_eq!(int(&bulk("x")), None);
        assert_eq!(int(&Value::Nil), None);
    }
}
