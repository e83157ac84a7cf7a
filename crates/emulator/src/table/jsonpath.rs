//! The JSONPath a CRD's printer column names, evaluated as the server's table convertor
//! does (client-go's `jsonpath` with missing keys allowed): the first result, or none.
//! Supported: fields (`.a.b`, `['a.b']`), indexes (`[0]`, `[-1]`), `[*]`, and filters
//! `[?(@.type=="Ready")]` with `==`/`!=`, the forms printer columns use.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<String>,
        eq: bool,
        value: String,
    },
}

/// A parsed path; `None` from [`JsonPath::parse`] when the syntax is not understood.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath(Vec<Step>);

impl JsonPath {
    pub(crate) fn parse(path: &str) -> Option<Self> {
        let s = path.trim();
        let s = s
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(s);
        let mut rest = s.strip_prefix('$').unwrap_or(s);
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('[') {
                let end = bracket_end(r)?;
                steps.push(bracket(&r[..end])?);
                rest = &r[end + 1..];
            } else if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                if end > 0 {
                    steps.push(Step::Field(r[..end].to_string()));
                }
                rest = &r[end..];
            } else {
                return None;
            }
        }
        Some(Self(steps))
    }

    /// The first value the path finds in `obj`.
    pub(crate) fn first<'a>(&self, obj: &'a Value) -> Option<&'a Value> {
        let mut found = vec![obj];
        for step in &self.0 {
            found = found.into_iter().flat_map(|v| apply(step, v)).collect();
        }
        found.into_iter().next()
    }
}

/// Where the bracket opened before `s` closes (quotes may hold `]`).
fn bracket_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
        .unwrap_or(s)
}

fn bracket(inner: &str) -> Option<Step> {
    let inner = inner.trim();
    if inner == "*" {
        return Some(Step::All);
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (lhs, eq, rhs) = match f.split_once("!=") {
            Some((l, r)) => (l, false, r),
            None => f.split_once("==").map(|(l, r)| (l, true, r))?,
        };
        let path = lhs.trim().strip_prefix("@.")?;
        let path = path.split('.').map(str::to_string).collect();
        let value = unquote(rhs).to_string();
        return Some(Step::Filter { path, eq, value });
    }
    if let Ok(i) = inner.parse::<i64>() {
        return Some(Step::Index(i));
    }
    Some(Step::Field(unquote(inner).to_string()))
}

fn apply<'a>(step: &Step, v: &'a Value) -> Vec<&'a Value> {
    match step {
        Step::Field(f) => v.get(f).into_iter().collect(),
        Step::Index(i) => {
            let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
            let at = if *i < 0 { items.len() as i64 + i } else { *i };
            usize::try_from(at)
                .ok()
                .and_then(|at| items.get(at))
                .into_iter()
                .collect()
        }
        Step::All => match v {
            Value::Array(items) => items.iter().collect(),
            Value::Object(m) => m.values().collect(),
            _ => vec![],
        },
        Step::Filter { path, eq, value } => v
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| {
                let got = path.iter().try_fold(*item, |cur, seg| cur.get(seg));
                (got.map(text).as_deref() == Some(value.as_str())) == *eq
            })
            .collect(),
    }
}

/// A value as a JSONPath template prints it: strings bare, anything else as JSON.
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_printer_columns_use() {
        let o = json!({"status": {"phase": "Running", "readySlices": 3,
            "conditions": [{"type": "SpecValid", "status": "True"}, {"type": "Ready", "status": "False"}]},
            "metadata": {"labels": {"a.b/c": "x"}}});
        let at = |p: &str| JsonPath::parse(p).unwrap().first(&o).cloned();
        assert_eq!(at(".status.phase"), Some(json!("Running")));
        assert_eq!(at("{.status.readySlices}"), Some(json!(3)));
        assert_eq!(at(".status.missing"), None);
        assert_eq!(
            at(".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("False"))
        );
        assert_eq!(at(".status.conditions[-1].type"), Some(json!("Ready")));
        assert_eq!(at(".status.conditions[*].type"), Some(json!("SpecValid")));
        assert_eq!(at(".metadata.labels['a.b/c']"), Some(json!("x")));
        assert!(JsonPath::parse("status").is_none());
    }
}
