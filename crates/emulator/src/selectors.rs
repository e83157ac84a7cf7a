//! Label and field selectors with the real API server's syntax.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

impl LabelSelector {
    /// Parse a label selector string.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_top(s) {
            if let Some(k) = term.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(k.trim().to_string()));
            } else if let Some(open) = term.find('(') {
                let close = term
                    .rfind(')')
                    .ok_or_else(|| format!("unable to parse requirement: {term}"))?;
                let head = term[..open].trim();
                let values: Vec<String> = term[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                let mut parts = head.split_whitespace();
                let key = parts.next().unwrap_or_default().to_string();
                match parts.next() {
                    Some("in") => reqs.push(LabelReq::In(key, values)),
                    Some("notin") => reqs.push(LabelReq::NotIn(key, values)),
                    _ => return Err(format!("unable to parse requirement: {term}")),
                }
            } else if let Some((k, v)) = term.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().to_string(), v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().to_string(), v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().to_string(), v.trim().to_string()));
            } else {
                if term.contains(char::is_whitespace) {
                    return Err(format!("unable to parse requirement: {term}"));
                }
                reqs.push(LabelReq::Exists(term));
            }
        }
        Ok(Self(reqs))
    }

    /// True if the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Does the object (its `metadata.labels`) match?
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=`). Which labels a resource
/// accepts is checked by the `fields` module, as the real server's field label conversion
/// does; here any dotted path into the object can be matched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parse a field selector string.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_top(s) {
            if let Some((k, v)) = term.split_once("!=") {
                reqs.push((k.trim().to_string(), false, v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push((k.trim().to_string(), true, v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push((k.trim().to_string(), true, v.trim().to_string()));
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            }
        }
        Ok(Self(reqs))
    }

    /// True if the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of a single `metadata.name=` / `metadata.namespace=` equality, if any.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| *eq && k == field)
            .map(|(_, _, v)| v.as_str())
    }

    /// The labels selected on, in order.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _, _)| k.as_str())
    }

    /// Does the object match? Missing fields compare as the empty string.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, eq, want)| (field_value(obj, path) == *want) == *eq)
    }
}

/// A field's value as the server's selectable field set gives it: booleans the server
/// formats even when unset, an event's `source` falling back to its reporting component,
/// any other path read from the object (missing: empty).
fn field_value(obj: &Value, path: &str) -> String {
    let at = |p: &str| {
        p.split('.')
            .try_fold(obj, |cur, seg| cur.get(seg))
            .filter(|v| !v.is_null())
    };
    let text = |v: Option<&Value>| match v {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    match path {
        "spec.hostNetwork" | "spec.unschedulable" => {
            at(path).is_some_and(|v| v == true).to_string()
        }
        // The server converts the old label to the new one.
        "spec.host" => text(at("spec.nodeName")),
        // A label the server accepts but does not match pods on: always empty.
        "status.podIPs" => String::new(),
        "source" => match text(at("source.component")) {
            s if s.is_empty() => text(at("reportingComponent")),
            s => s,
        },
        _ => text(at(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_syntax() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("tier,app"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("missing notin (x)"));
        assert!(!m("missing in (x)"));
        assert!(m("app in (web),tier=fe"));
        assert!(m(""));
    }

    #[test]
    fn field_selector_syntax() {
        let o = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {}, "status": {"phase": "Running"}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.namespace==ns,status.phase=Running"));
        assert!(m("spec.nodeName="));
        assert!(!m("spec.nodeName!="));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
