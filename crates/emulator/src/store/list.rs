//! Lists: label and field selectors, `limit`/`continue` pagination, and
//! `resourceVersionMatch=Exact` expiry.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde_json::Value;

use super::info::ResourceInfo;
use super::obj::{Obj, ObjKey};
use super::state::Store;
use crate::errors::ApiError;
use crate::event_versions::view;
use crate::selectors::{FieldSelector, LabelSelector};

/// Result of a list.
pub struct ListResult {
    /// Matching objects (one page).
    pub items: Vec<Obj>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token, when more pages remain.
    pub cont: Option<String>,
    /// Number of remaining items when paginating.
    pub remaining: Option<u64>,
}

impl Store {
    /// List objects (one page).
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
        exact_rv: Option<u64>,
    ) -> Result<ListResult, ApiError> {
        if let Some(rv) = exact_rv
            && rv < self.expired_floor
        {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                self.expired_floor
            )));
        }
        let empty = BTreeMap::new();
        let map = self.data.get(&info.key).unwrap_or(&empty);
        let ns = if info.namespaced {
            ns.or(fields.exact("metadata.namespace"))
        } else {
            None
        };
        let mut start: Bound<ObjKey> = match ns {
            Some(ns) => Bound::Included((ns.to_string(), String::new())),
            None => Bound::Unbounded,
        };
        let mut list_rv = self.rv;
        if let Some(c) = cont.filter(|c| !c.is_empty()) {
            let mut parts = c.splitn(3, '/');
            let (Some(rv), Some(cns), Some(cname)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(ApiError::bad_request(format!(
                    "invalid continue token: {c}"
                )));
            };
            let rv: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid continue token: {c}")))?;
            if rv < self.expired_floor {
                return Err(ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            list_rv = rv;
            start = Bound::Excluded((cns.to_string(), cname.to_string()));
        }
        let api_version = info.api_version();
        let matches = |o: &Value| labels.matches(o) && fields.matches(o);
        let view = |o: &Obj| view(&api_version, o);
        let mut items = Vec::new();
        let mut cont_out = None;
        let mut remaining = None;
        if let Some(name) = fields.exact("metadata.name")
            && cont.is_none()
        {
            let key = (ns.unwrap_or("").to_string(), name.to_string());
            if ns.is_some() || !info.namespaced {
                if let Some(o) = map.get(&key).map(view).filter(|o| matches(o)) {
                    items.push(o);
                }
                return Ok(ListResult {
                    items,
                    rv: list_rv,
                    cont: None,
                    remaining: None,
                });
            }
        }
        let iter = map
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| ns.is_none_or(|ns| k.0 == ns))
            .map(|(k, o)| (k, view(o)))
            .filter(|(_, o)| matches(o));
        let limit = limit.filter(|l| *l > 0);
        let mut last_key = None;
        let mut count_rest = 0u64;
        for (k, o) in iter {
            if limit.is_some_and(|l| items.len() >= l) {
                count_rest += 1;
                continue;
            }
            items.push(o);
            last_key = Some(k);
        }
        if count_rest > 0
            && let Some((kns, kname)) = last_key
        {
            cont_out = Some(format!("{list_rv}/{kns}/{kname}"));
            remaining = Some(count_rest);
        }
        Ok(ListResult {
            items,
            rv: list_rv,
            cont: cont_out,
            remaining,
        })
    }
}
