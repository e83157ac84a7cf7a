//! `fieldValidation` over HTTP, as kube-apiserver applies it: a patch is checked by the
//! object it produces (the server strict-decodes the patched object, not the patch), so
//! kubectl's three-way apply can remove a stray field by sending `"field": null`.

use http::Request;
use serde_json::{Value, json};

mod common;
use common::*;

/// The answer to one request: status, `Warning` headers, body.
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

async fn send(
    emu: &slice_emulator::Emulator,
    method: &str,
    uri: &str,
    ct: &str,
    body: Value,
) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .body(serde_json::to_vec(&body).unwrap().into())
        .unwrap();
    let res = emu.client().send(req).await.unwrap();
    let code = res.status().as_u16();
    let warnings = res
        .headers()
        .get_all("warning")
        .iter()
        .map(|w| w.to_str().unwrap().to_string())
        .collect();
    let bytes = res.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap();
    Answer {
        code,
        warnings,
        body,
    }
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

#[tokio::test]
async fn a_patch_is_checked_by_the_object_it_produces() {
    let emu = emu().await;
    // `kubectl apply --validate=false` of a file with a typo (`dta`).
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"a": "1"}});
    let created = send(
        &emu,
        "POST",
        &format!("{CMS}?fieldValidation=Ignore"),
        "application/json",
        cm,
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);

    // The typo fixed in the file: kubectl's three-way patch deletes the field it applied.
    let fixed = json!({"data": {"a": "1"}, "dta": null});
    let uri = format!("{CMS}/c?fieldValidation=Strict");
    let r = send(&emu, "PATCH", &uri, STRATEGIC, fixed.clone()).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.body["data"], json!({"a": "1"}));
    assert_eq!(send(&emu, "PATCH", &uri, MERGE, fixed).await.code, 200);

    // A field the patched object would not know is refused whatever the patch type: 422,
    // as the server reports a patched object it cannot decode.
    let bad_patches = [
        (MERGE, json!({"foo": 1})),
        (STRATEGIC, json!({"foo": 1})),
        (
            JSON_PATCH,
            json!([{"op": "add", "path": "/foo", "value": 1}]),
        ),
    ];
    for (ct, patch) in bad_patches {
        let r = send(&emu, "PATCH", &uri, ct, patch).await;
        assert_eq!(
            (r.code, &r.body["reason"]),
            (422, &json!("Invalid")),
            "{ct}: {}",
            r.body
        );
        let message = r.body["message"].as_str().unwrap();
        assert!(
            message.starts_with(" \"\" is invalid: patch: Invalid value: ")
                && message.ends_with(": strict decoding error: unknown field \"foo\""),
            "{ct}: {message}"
        );
    }
    let warn = format!("{CMS}/c?fieldValidation=Warn");
    let r = send(&emu, "PATCH", &warn, MERGE, json!({"foo": 1})).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.warnings, [r#"299 - "unknown field \"foo\"""#]);
}

#[tokio::test]
async fn a_built_in_kind_keeps_no_unknown_field() {
    let emu = emu().await;
    // The server decodes a built-in kind into its Go type, which has nowhere to keep
    // `dta`: let through by Ignore or Warn, it is gone from what is stored.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"a": "1"}});
    let r = send(
        &emu,
        "POST",
        &format!("{CMS}?fieldValidation=Ignore"),
        "application/json",
        cm,
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body.get("dta"), None);
    let put = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}, "dta": {}});
    let r = send(
        &emu,
        "PUT",
        &format!("{CMS}/c?fieldValidation=Warn"),
        "application/json",
        put,
    )
    .await;
    assert_eq!((r.code, r.warnings.len()), (200, 1), "{}", r.body);
    assert_eq!(r.body.get("dta"), None);
    let patch = json!({"metadata": {"bogus": 1}, "dta": {}});
    let r = send(&emu, "PATCH", &format!("{CMS}/c"), MERGE, patch).await;
    assert_eq!((r.code, r.warnings.len()), (200, 2), "{}", r.body);
    let stored = emu
        .object("v1", "configmaps", Some("default"), "c")
        .unwrap();
    assert_eq!(
        (stored.get("dta"), stored.pointer("/metadata/bogus")),
        (None, None),
        "{stored}"
    );
    assert_eq!(stored["data"], json!({"a": "1"}));
}

#[tokio::test]
async fn server_side_apply_of_a_built_in_kind_refuses_an_unknown_field() {
    let emu = emu().await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"a": "1"}});
    let uri = format!("{CMS}/c?fieldManager=me");
    let r = send(&emu, "PATCH", &uri, "application/apply-patch+yaml", cm).await;
    assert_eq!(r.code, 500, "{}", r.body);
    assert_eq!(
        r.body["message"],
        "failed to create typed patch object (default/c; /v1, Kind=ConfigMap): .dta: field not declared in schema"
    );
    assert_eq!(emu.object("v1", "configmaps", Some("default"), "c"), None);
}
