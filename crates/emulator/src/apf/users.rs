//! Who sends a request: bearer tokens the test hands out, as `--token-auth-file` does.
//! A request without credentials is the cluster admin (`system:masters`), as the emulator
//! has always treated its clients; an unknown token is refused with 401, as the server does.

use std::collections::HashMap;
use std::sync::Mutex;

use http::HeaderMap;

use crate::errors::ApiError;

/// An authenticated user, as the API server's authenticator reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// The admin every credential-less client is (`system:masters`: APF's `exempt`).
    pub fn admin() -> User {
        User {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// A ServiceAccount's user, with the groups the token authenticator gives it.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// `(namespace, name)` when this is a ServiceAccount's user.
    pub fn as_service_account(&self) -> Option<(&str, &str)> {
        let rest = self.name.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

/// Tokens handed out so far.
#[derive(Default)]
pub(crate) struct Users {
    tokens: Mutex<HashMap<String, User>>,
}

impl Users {
    /// A new token for `user`.
    pub fn token_for(&self, user: User) -> String {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let token = format!("emulator-token-{}", tokens.len() + 1);
        tokens.insert(token.clone(), user);
        token
    }

    /// The user a request authenticates as.
    pub fn identify(&self, headers: &HeaderMap) -> Result<User, ApiError> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(User::admin());
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        token
            .and_then(|t| tokens.get(t).cloned())
            .ok_or_else(|| ApiError::new(401, "Unauthorized", "Unauthorized"))
    }
}
