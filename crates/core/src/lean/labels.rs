//! A pod's `slices.dev/` labels in one allocation.
//!
//! A `BTreeMap<String, String>` of a worker's dozen labels is three tree nodes and 24
//! strings, about 2.4 KB in some 27 allocations, and reading it touches most of them. The
//! planner reads every label of every pod of a cluster on each plan (64,000 pods at 1,000 x
//! 64) and the cache holds them all, so the lean view keeps them as one string instead: per
//! label, in name order, the lengths of its name (without the prefix) and value as one
//! character each, then the name and the value. Reading it needs no search for separators.

use std::fmt;

use crate::constants::LABEL_PREFIX;

/// The `slices.dev/` labels of a pod. Other labels are not kept.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OwnLabels {
    text: Box<str>,
}

/// The longest name or value kept: its length is written as one ASCII character. The API
/// server allows 63 (a name's prefix aside); a longer one would not be kept.
const MAX_LEN: usize = 127;
// A length above 127 would be written as two bytes and shift every label after it.
const _: () = assert!(MAX_LEN < 128);

impl OwnLabels {
    /// The `slices.dev/` labels among `labels` (of a key given twice, the first).
    pub fn new<K: AsRef<str>, V: AsRef<str>>(labels: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut own: Vec<(K, V)> = labels
            .into_iter()
            .filter(|(k, v)| {
                let (k, v) = (k.as_ref(), v.as_ref());
                k.starts_with(LABEL_PREFIX)
                    && k.len() - LABEL_PREFIX.len() <= MAX_LEN
                    && v.len() <= MAX_LEN
            })
            .collect();
        own.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        own.dedup_by(|a, b| a.0.as_ref() == b.0.as_ref());
        let mut text = String::new();
        for (k, v) in &own {
            let (name, value) = (&k.as_ref()[LABEL_PREFIX.len()..], v.as_ref());
            for len in [name.len(), value.len()] {
                text.push(char::from(u8::try_from(len).expect("at most MAX_LEN")));
            }
            text.push_str(name);
            text.push_str(value);
        }
        OwnLabels { text: text.into() }
    }

    /// Each label as (name without `slices.dev/`, value), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let text = &*self.text;
        let mut at = 0;
        std::iter::from_fn(move || {
            let lengths = text.as_bytes().get(at..at + 2)?;
            let name = at + 2;
            let value = name + usize::from(lengths[0]);
            at = value + usize::from(lengths[1]);
            Some((text.get(name..value)?, text.get(value..at)?))
        })
    }

    /// The value of the label `key` (with its `slices.dev/` prefix).
    pub fn get(&self, key: &str) -> Option<&str> {
        let name = key.strip_prefix(LABEL_PREFIX)?;
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Set `key` (with its prefix) to `value`; a key outside `slices.dev/` is not kept.
    pub fn insert(&mut self, key: &str, value: &str) {
        let name = key.strip_prefix(LABEL_PREFIX);
        let kept = self
            .full()
            .filter(|(k, _)| Some(&k[LABEL_PREFIX.len()..]) != name);
        let labels: Vec<(String, String)> = kept.chain([(key.to_string(), value.into())]).collect();
        *self = OwnLabels::new(labels);
    }

    /// Remove `key` (with its prefix).
    pub fn remove(&mut self, key: &str) {
        let labels: Vec<(String, String)> = self.full().filter(|(k, _)| k != key).collect();
        *self = OwnLabels::new(labels);
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Each label with its full key.
    fn full(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.iter()
            .map(|(n, v)| (format!("{LABEL_PREFIX}{n}"), v.to_string()))
    }
}

impl fmt::Debug for OwnLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.full()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::constants::{LABEL_CLUSTER, LABEL_EPOCH, LABEL_REPLICA_INDEX};

    #[test]
    fn keeps_only_our_labels_in_name_order_and_reads_them_back() {
        let map = BTreeMap::from([
            (LABEL_REPLICA_INDEX.to_string(), "12".to_string()),
            ("team".to_string(), "b".to_string()),
            ("slices.devx/cluster".to_string(), "no".to_string()),
            (LABEL_CLUSTER.to_string(), "demo".to_string()),
            (LABEL_EPOCH.to_string(), String::new()),
        ]);
        let labels = OwnLabels::new(&map);
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("cluster", "demo"), ("epoch", ""), ("replica-index", "12")]
        );
        assert_eq!(labels.get(LABEL_CLUSTER), Some("demo"));
        assert_eq!(labels.get(LABEL_EPOCH), Some(""));
        assert_eq!(labels.get("team"), None);
        assert_eq!(labels.get("slices.dev/role"), None);
    }

    #[test]
    fn insert_replaces_and_remove_drops() {
        let mut labels = OwnLabels::default();
        assert!(labels.is_empty());
        labels.insert(LABEL_CLUSTER, "a");
        labels.insert(LABEL_EPOCH, "1");
        labels.insert(LABEL_CLUSTER, "b");
        labels.insert("team", "x");
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("cluster", "b"), ("epoch", "1")]
        );
        labels.remove(LABEL_CLUSTER);
        assert_eq!(labels.iter().collect::<Vec<_>>(), [("epoch", "1")]);
        assert_eq!(format!("{labels:?}"), r#"{"slices.dev/epoch": "1"}"#);
    }

    #[test]
    fn any_text_up_to_the_longest_kept_reads_back_whole() {
        let long = "v".repeat(MAX_LEN);
        let labels = OwnLabels::new([
            (LABEL_CLUSTER, "é-ü"),
            (LABEL_EPOCH, long.as_str()),
            ("slices.dev/x", &"w".repeat(MAX_LEN + 1)),
        ]);
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("cluster", "é-ü"), ("epoch", long.as_str())]
        );
    }
}
