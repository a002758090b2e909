//! The secret-bearing parts of a server's config (env values, header values, literal tokens and
//! keys) as the JSON blobs [`stored`](crate::stored) seals with a [`SecretBox`] before they go
//! into the store, and opens again when the config is loaded.

use std::collections::BTreeMap;

use agentry_schema::secret::Secret;
use agentry_sealing::{SecretBox, SecretError};
use serde::{Deserialize, Serialize};

use crate::client::config::{DEFAULT_API_KEY_HEADER, HttpAuth, OAuthConfig, OAuthGrant};

/// Seal a stdio server's environment as one JSON object `{"NAME": "value", …}`.
pub fn seal_env(
    secrets: &SecretBox,
    env: &BTreeMap<String, Secret>,
) -> Result<String, SecretError> {
    let plain: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.expose())).collect();
    secrets.seal_json(&plain)
}

/// Open what [`seal_env`] sealed.
pub fn open_env(
    secrets: &SecretBox,
    sealed: &str,
) -> Result<BTreeMap<String, Secret>, SecretError> {
    let plain: BTreeMap<String, String> = secrets.open_json(sealed, "env object")?;
    Ok(plain
        .into_iter()
        .map(|(k, v)| (k, Secret::new(v)))
        .collect())
}

/// Seal an HTTP server's headers and auth as one JSON object `{"headers": {…}, "auth": {…}}`
/// (auth in the same tagged shape as the config, with literal tokens in the clear inside).
pub fn seal_auth_and_headers(
    secrets: &SecretBox,
    headers: &BTreeMap<String, Secret>,
    auth: &HttpAuth,
) -> Result<String, SecretError> {
    let blob = HttpSecretsBlob {
        headers: headers
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().to_string()))
            .collect(),
        auth: AuthBlob::from(auth),
    };
    secrets.seal_json(&blob)
}

/// Open what [`seal_auth_and_headers`] sealed.
pub fn open_auth_and_headers(
    secrets: &SecretBox,
    sealed: &str,
) -> Result<(BTreeMap<String, Secret>, HttpAuth), SecretError> {
    let blob: HttpSecretsBlob = secrets.open_json(sealed, "headers/auth object")?;
    Ok((
        blob.headers
            .into_iter()
            .map(|(k, v)| (k, Secret::new(v)))
            .collect(),
        blob.auth.into(),
    ))
}

// ---- the JSON inside sealed blobs: secrets in the clear, so never logged or returned ----

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSecretsBlob {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    auth: AuthBlob,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum AuthBlob {
    #[default]
    None,
    Bearer {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    ApiKey {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        #[serde(default = "default_api_key_header")]
        header: String,
    },
    Basic {
        username_env: String,
        password_env: String,
    },
    #[serde(rename = "oauth")]
    OAuth {
        #[serde(default)]
        grant: OAuthGrant,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_secret_env: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_secret: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_metadata_url: Option<String>,
    },
}

fn default_api_key_header() -> String {
    DEFAULT_API_KEY_HEADER.to_string()
}

impl From<&HttpAuth> for AuthBlob {
    fn from(auth: &HttpAuth) -> Self {
        match auth {
            HttpAuth::None => AuthBlob::None,
            HttpAuth::Bearer { token_env, token } => AuthBlob::Bearer {
                token_env: token_env.clone(),
                token: token.as_ref().map(|t| t.expose().to_string()),
            },
            HttpAuth::ApiKey {
                key_env,
                key,
                header,
            } => AuthBlob::ApiKey {
                key_env: key_env.clone(),
                key: key.as_ref().map(|k| k.expose().to_string()),
                header: header.clone(),
            },
            HttpAuth::Basic {
                username_env,
                password_env,
            } => AuthBlob::Basic {
                username_env: username_env.clone(),
                password_env: password_env.clone(),
            },
            HttpAuth::OAuth(o) => AuthBlob::OAuth {
                grant: o.grant,
                client_id: o.client_id.clone(),
                client_secret_env: o.client_secret_env.clone(),
                client_secret: o.client_secret.as_ref().map(|s| s.expose().to_string()),
                scopes: o.scopes.clone(),
                client_metadata_url: o.client_metadata_url.clone(),
            },
        }
    }
}

impl From<AuthBlob> for HttpAuth {
    fn from(blob: AuthBlob) -> Self {
        match blob {
            AuthBlob::None => HttpAuth::None,
            AuthBlob::Bearer { token_env, token } => HttpAuth::Bearer {
                token_env,
                token: token.map(Secret::new),
            },
            AuthBlob::ApiKey {
                key_env,
                key,
                header,
            } => HttpAuth::ApiKey {
                key_env,
                key: key.map(Secret::new),
                header,
            },
            AuthBlob::Basic {
                username_env,
                password_env,
            } => HttpAuth::Basic {
                username_env,
                password_env,
            },
            AuthBlob::OAuth {
                grant,
                client_id,
                client_secret_env,
                client_secret,
                scopes,
                client_metadata_url,
            } => HttpAuth::OAuth(OAuthConfig {
                grant,
                client_id,
                client_secret_env,
                client_secret: client_secret.map(Secret::new),
                scopes,
                client_metadata_url,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_box() -> SecretBox {
        SecretBox::from_key_bytes([42; 32])
    }

    #[test]
    fn env_and_http_blobs_round_trip_with_secrets_hidden() {
        let b = test_box();
        let env: BTreeMap<String, Secret> = [("TOKEN".to_string(), Secret::new("sk-123"))].into();
        let sealed = seal_env(&b, &env).unwrap();
        assert!(!sealed.contains("sk-123") && !sealed.contains("TOKEN"));
        assert_eq!(open_env(&b, &sealed).unwrap(), env);

        let headers: BTreeMap<String, Secret> = [("X-Team".to_string(), Secret::new("t1"))].into();
        for auth in [
            HttpAuth::None,
            HttpAuth::Bearer {
                token_env: None,
                token: Some(Secret::new("tok")),
            },
            HttpAuth::ApiKey {
                key_env: Some("K".into()),
                key: None,
                header: "X-Key".into(),
            },
            HttpAuth::Basic {
                username_env: "U".into(),
                password_env: "P".into(),
            },
            HttpAuth::OAuth(OAuthConfig {
                grant: OAuthGrant::ClientCredentials,
                client_id: Some("machine".into()),
                client_secret: Some(Secret::new("cs-secret-1")),
                scopes: vec!["read".into(), "write".into()],
                ..OAuthConfig::default()
            }),
        ] {
            let sealed = seal_auth_and_headers(&b, &headers, &auth).unwrap();
            assert!(!sealed.contains("cs-secret-1") && !sealed.contains("tok"));
            assert_eq!(
                open_auth_and_headers(&b, &sealed).unwrap(),
                (headers.clone(), auth)
            );
        }
        // An env blob is not a headers blob.
        let err = open_auth_and_headers(&b, &seal_env(&b, &env).unwrap()).unwrap_err();
        assert!(matches!(err, SecretError::BadPayload { .. }), "{err:?}");
    }
}
