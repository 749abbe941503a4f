//! Comparing records as JSON.

use serde_json::Value;

/// The JSON paths at which two records differ, with both values.
pub fn field_differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => field_differences(v, w, &p, out),
                    (Some(v), None) => out.push(format!("{p}: {v} -> (absent)")),
                    (None, Some(w)) => out.push(format!("{p}: (absent) -> {w}")),
                    (None, None) => {}
                }
            }
        }
        _ if a != b => out.push(format!(
            "{}: {a} -> {b}",
            if path.is_empty() { "." } else { path }
        )),
        _ => {}
    }
}
