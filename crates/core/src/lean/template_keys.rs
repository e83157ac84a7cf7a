//! The one annotation the lean pod view keeps: which labels and annotations the pod took
//! from its template ([`ANNOTATION_TEMPLATE_KEYS`]), so a key later removed from the template
//! is removed from the pod too. Read straight from the wire: other annotations are skipped,
//! never copied.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::constants::ANNOTATION_TEMPLATE_KEYS;

/// The value of [`ANNOTATION_TEMPLATE_KEYS`] among a pod's annotations, if it has one.
#[derive(Default)]
pub struct TemplateKeys(pub Option<Box<str>>);

impl<'de> Deserialize<'de> for TemplateKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OnlyOurs)
    }
}

struct OnlyOurs;

impl<'de> Visitor<'de> for OnlyOurs {
    type Value = TemplateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of annotations")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TemplateKeys, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == ANNOTATION_TEMPLATE_KEYS {
                found = Some(map.next_value::<String>()?.into_boxed_str());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(TemplateKeys(found))
    }
}

/// The keys a template gave a pod, as the annotation lists them: `labels` and
/// `annotations`, each a list of keys (JSON).
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeysFromTemplate {
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub annotations: Vec<String>,
}

impl KeysFromTemplate {
    /// The annotation's value. An unreadable one (written by hand) names no key.
    pub fn parse(value: &str) -> KeysFromTemplate {
        serde_json::from_str(value).unwrap_or_default()
    }

    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a list of strings serializes")
    }
}
