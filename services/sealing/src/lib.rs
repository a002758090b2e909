//! agentry-sealing: secrets at rest. [`SecretBox`] seals a secret before it goes into the store
//! and opens it when it is read again. Today it seals the secret-bearing parts of tenants' MCP
//! server configs (`agentry_mcp::stored`); it is its own crate, depending only on `schema`, so
//! that anything else a tenant hands us to keep (model keys, data-source credentials, OAuth
//! tokens) can be sealed the same way without depending on MCP or on the store.
//!
//! **Cipher.** XChaCha20-Poly1305 (RustCrypto `chacha20poly1305`) with a fresh random 192-bit
//! nonce per seal. The extended nonce makes random nonces safe for any number of seals under one
//! key (96-bit nonces, as in AES-GCM, would need a counter or a cap), and the cipher needs no
//! hardware support to be constant-time.
//!
//! **Sealed text.** `v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`. The key id is 8 hex
//! digits of `SHA-256("agentry-mcp-secretbox-key-id" ‖ key)`; it says *which* key sealed a value
//! (so opening with another key is reported as exactly that, not as "tampered", and a later
//! version can keep old keys for rotation) without saying anything useful about the key. The
//! `v1:<key id>` header is the AEAD's associated data, so it is authenticated too.
//!
//! **Key.** From config (`AGENTRY_MCP__ENCRYPTION_KEY`), one of:
//! - 32 random bytes in base64 (standard or URL-safe, padded or not): `openssl rand -base64 32`;
//! - 32 random bytes as 64 hex digits: `openssl rand -hex 32`;
//! - `passphrase:<at least 16 characters>`, stretched with Argon2id (m = 64 MiB, t = 3, p = 1,
//!   RFC 9106's second recommended setting with one lane). The salt is a fixed application
//!   string because there is nowhere to keep a random one: the same passphrase must give the same
//!   key on every start. A random key is better; the passphrase form is for operators whose
//!   secret store only holds memorable strings.
//!
//! Anything else is refused rather than guessed at: a mistyped key silently becoming a passphrase
//! would seal data under a key nobody can reproduce.

use agentry_schema::error::ErrorCode;
use agentry_schema::secret::Secret;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The config key the gateway reads the encryption key from (as an environment variable).
pub const ENCRYPTION_KEY_ENV: &str = "AGENTRY_MCP__ENCRYPTION_KEY";
/// Prefix that marks a key given as a passphrase.
pub const PASSPHRASE_PREFIX: &str = "passphrase:";
/// Shortest passphrase accepted.
pub const MIN_PASSPHRASE_CHARS: usize = 16;
/// Version tag of the sealed format written by [`SecretBox::seal`].
pub const SEALED_VERSION: &str = "v1";

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const KEY_ID_CONTEXT: &[u8] = b"agentry-mcp-secretbox-key-id";
const PASSPHRASE_SALT: &[u8] = b"agentry/mcp-secrets/v1";
const ARGON2_M_COST_KIB: u32 = 64 * 1024;
const ARGON2_T_COST: u32 = 3;
const ARGON2_P_COST: u32 = 1;

/// What can go wrong with a key or a sealed value. Messages say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error(
        "no MCP encryption key is configured, so secrets (env values, headers, tokens) of MCP \
         servers cannot be stored or read: set {ENCRYPTION_KEY_ENV} to 32 random bytes in base64 \
         (e.g. the output of `openssl rand -base64 32`)"
    )]
    NoKey,
    #[error("the MCP encryption key ({ENCRYPTION_KEY_ENV}) is not usable: {0}")]
    BadKey(String),
    #[error("not a sealed secret: {0}")]
    Malformed(String),
    #[error(
        "sealed secret has format version {0:?}; this Agentry reads only {SEALED_VERSION:?} \
         (was it written by a newer version?)"
    )]
    UnsupportedVersion(String),
    #[error(
        "sealed secret was sealed with another key (key id {sealed_with}; the configured key \
         has id {configured}): was {ENCRYPTION_KEY_ENV} changed?"
    )]
    WrongKey {
        sealed_with: String,
        configured: String,
    },
    #[error(
        "sealed secret failed authentication: it was changed after sealing (or sealed with a \
         different key that has the same key id)"
    )]
    Tampered,
    #[error("could not seal: {0}")]
    SealFailed(String),
    #[error("opened secret is not the expected {what}: {message}")]
    BadPayload { what: &'static str, message: String },
}

impl SecretError {
    pub fn code(&self) -> ErrorCode {
        match self {
            // The server is not set up to hold secrets: not the client's fault, not a bug.
            SecretError::NoKey => ErrorCode::ServiceUnavailable,
            _ => ErrorCode::InternalError,
        }
    }
}

/// Seals and opens secrets with one 256-bit key. `Debug` shows only the key id.
#[derive(Clone)]
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
    key_id: String,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBox")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SecretBox {
    /// A box from the configured key text (base64, hex or `passphrase:…`; see the module docs).
    pub fn new(key: &str) -> Result<Self, SecretError> {
        Ok(Self::from_key_bytes(parse_key(key)?))
    }

    /// A box from the optional config value; `None` (or an empty value) is [`SecretError::NoKey`].
    pub fn from_config(key: Option<&Secret>) -> Result<Self, SecretError> {
        match key {
            Some(k) if !k.expose().trim().is_empty() => Self::new(k.expose()),
            _ => Err(SecretError::NoKey),
        }
    }

    pub fn from_key_bytes(key: [u8; KEY_LEN]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(KEY_ID_CONTEXT);
        hasher.update(key);
        let key_id = hex::encode(&hasher.finalize()[..4]);
        Self {
            cipher: XChaCha20Poly1305::new(&key.into()),
            key_id,
        }
    }

    /// A new random key in the base64 form [`SecretBox::new`] accepts.
    pub fn generate_key() -> Result<String, SecretError> {
        let key = chacha20poly1305::Key::try_generate()
            .map_err(|e| SecretError::SealFailed(format!("the system RNG failed: {e}")))?;
        Ok(STANDARD.encode(key))
    }

    /// 8 hex digits naming the key (not secret).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn header(&self) -> String {
        format!("{SEALED_VERSION}:{}", self.key_id)
    }

    /// Encrypt `plaintext` under a fresh random nonce: `v1:<key id>:<base64url>`. Sealing the same
    /// text twice gives different output.
    pub fn seal(&self, plaintext: &str) -> Result<String, SecretError> {
        let nonce = XNonce::try_generate()
            .map_err(|e| SecretError::SealFailed(format!("the system RNG failed: {e}")))?;
        let header = self.header();
        let ciphertext = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: header.as_bytes(),
                },
            )
            .map_err(|_| SecretError::SealFailed("the text is too long to seal".into()))?;
        let mut body = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&ciphertext);
        Ok(format!("{header}:{}", URL_SAFE_NO_PAD.encode(body)))
    }

    /// Decrypt what [`SecretBox::seal`] produced. A changed byte anywhere, another key, or text
    /// that was never sealed is an error naming which.
    pub fn open(&self, sealed: &str) -> Result<String, SecretError> {
        let mut parts = sealed.splitn(3, ':');
        let (Some(version), Some(key_id), Some(body)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(SecretError::Malformed(
                "expected `v1:<key id>:<data>`".to_string(),
            ));
        };
        if version != SEALED_VERSION {
            let looks_like_version = version.len() <= 8
                && version.starts_with('v')
                && version.len() > 1
                && version[1..].bytes().all(|b| b.is_ascii_digit());
            return Err(if looks_like_version {
                SecretError::UnsupportedVersion(version.to_string())
            } else {
                SecretError::Malformed("expected `v1:<key id>:<data>`".to_string())
            });
        }
        if key_id != self.key_id {
            return Err(SecretError::WrongKey {
                sealed_with: key_id.chars().take(16).collect(),
                configured: self.key_id.clone(),
            });
        }
        let raw = URL_SAFE_NO_PAD.decode(body).map_err(|_| {
            SecretError::Malformed(
                "the data is not valid base64url (was it cut or changed?)".into(),
            )
        })?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return Err(SecretError::Malformed(format!(
                "the data is {} bytes; a sealed value has at least {}",
                raw.len(),
                NONCE_LEN + TAG_LEN
            )));
        }
        let (nonce, ciphertext) = raw.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce)
            .map_err(|_| SecretError::Malformed("the nonce has the wrong length".into()))?;
        let header = self.header();
        let plain = self
            .cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad: header.as_bytes(),
                },
            )
            .map_err(|_| SecretError::Tampered)?;
        String::from_utf8(plain).map_err(|_| SecretError::BadPayload {
            what: "UTF-8 text",
            message: "the opened bytes are not UTF-8".into(),
        })
    }

    /// Seal a value as JSON text (for a secret with parts, e.g. a server's env or its headers).
    pub fn seal_json(&self, value: &impl Serialize) -> Result<String, SecretError> {
        let text = serde_json::to_string(value)
            .map_err(|e| SecretError::SealFailed(format!("could not encode JSON: {e}")))?;
        self.seal(&text)
    }

    /// Open what [`SecretBox::seal_json`] sealed; `what` names the expected value in the error
    /// when the opened text is not one.
    pub fn open_json<T: for<'de> Deserialize<'de>>(
        &self,
        sealed: &str,
        what: &'static str,
    ) -> Result<T, SecretError> {
        let text = self.open(sealed)?;
        serde_json::from_str(&text).map_err(|e| SecretError::BadPayload {
            what,
            message: e.to_string(),
        })
    }
}

fn parse_key(key: &str) -> Result<[u8; KEY_LEN], SecretError> {
    let key = key.trim();
    if key.is_empty() {
        return Err(SecretError::NoKey);
    }
    if let Some(passphrase) = key.strip_prefix(PASSPHRASE_PREFIX) {
        return derive_from_passphrase(passphrase);
    }
    if key.len() == 2 * KEY_LEN && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut out = [0u8; KEY_LEN];
        hex::decode_to_slice(key, &mut out)
            .map_err(|e| SecretError::BadKey(format!("not valid hex: {e}")))?;
        return Ok(out);
    }
    let decoded = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(key).ok());
    match decoded {
        Some(bytes) if bytes.len() == KEY_LEN => {
            let mut out = [0u8; KEY_LEN];
            out.copy_from_slice(&bytes);
            Ok(out)
        }
        Some(bytes) => Err(SecretError::BadKey(format!(
            "it decodes from base64 to {} bytes; the key must be exactly {KEY_LEN} random bytes \
             (generate one with `openssl rand -base64 32`)",
            bytes.len()
        ))),
        None => Err(SecretError::BadKey(format!(
            "give 32 random bytes as base64 (`openssl rand -base64 32`) or as 64 hex digits \
             (`openssl rand -hex 32`), or a passphrase as `{PASSPHRASE_PREFIX}<at least \
             {MIN_PASSPHRASE_CHARS} characters>`"
        ))),
    }
}

fn derive_from_passphrase(passphrase: &str) -> Result<[u8; KEY_LEN], SecretError> {
    let chars = passphrase.chars().count();
    if chars < MIN_PASSPHRASE_CHARS {
        return Err(SecretError::BadKey(format!(
            "the passphrase has {chars} characters; at least {MIN_PASSPHRASE_CHARS} are needed \
             (better: a random key from `openssl rand -base64 32`)"
        )));
    }
    let params = argon2::Params::new(
        ARGON2_M_COST_KIB,
        ARGON2_T_COST,
        ARGON2_P_COST,
        Some(KEY_LEN),
    )
    .map_err(|e| SecretError::BadKey(format!("Argon2 parameters: {e}")))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = [0u8; KEY_LEN];
    argon
        .hash_password_into(passphrase.as_bytes(), PASSPHRASE_SALT, &mut out)
        .map_err(|e| SecretError::BadKey(format!("Argon2 failed: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY_B64: &str = "q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k=";

    fn test_box() -> SecretBox {
        SecretBox::new(KEY_B64).unwrap()
    }

    #[test]
    fn keys_are_read_from_base64_hex_and_passphrase() {
        let from_b64 = SecretBox::new(KEY_B64).unwrap();
        let from_hex = SecretBox::new(&hex::encode(STANDARD.decode(KEY_B64).unwrap())).unwrap();
        let from_b64_nopad =
            SecretBox::new(&format!("  {}\n", KEY_B64.trim_end_matches('='))).unwrap();
        assert_eq!(from_b64.key_id(), from_hex.key_id());
        assert_eq!(from_b64.key_id(), from_b64_nopad.key_id());
        // The same key opens what another box with that key sealed.
        let sealed = from_hex.seal("hello").unwrap();
        assert_eq!(from_b64.open(&sealed).unwrap(), "hello");

        let p1 = SecretBox::new("passphrase:correct horse battery staple").unwrap();
        let p2 = SecretBox::new("passphrase:correct horse battery staple").unwrap();
        let p3 = SecretBox::new("passphrase:correct horse battery stapl3").unwrap();
        assert_eq!(
            p1.key_id(),
            p2.key_id(),
            "a passphrase gives the same key every time"
        );
        assert_ne!(p1.key_id(), p3.key_id());
        assert_eq!(p2.open(&p1.seal("s").unwrap()).unwrap(), "s");
    }

    #[test]
    fn bad_keys_are_refused_with_a_clear_reason() {
        let err = |k: &str| SecretBox::new(k).unwrap_err().to_string();
        assert!(err("c2hvcnQ=").contains("decodes from base64 to 5 bytes"));
        assert!(err("not a key at all!").contains("openssl rand -base64 32"));
        assert!(err("passphrase:short").contains("at least 16"));
        assert_eq!(
            SecretBox::from_config(None).unwrap_err(),
            SecretError::NoKey
        );
        assert_eq!(
            SecretBox::from_config(Some(&Secret::new("  "))).unwrap_err(),
            SecretError::NoKey
        );
        assert!(SecretError::NoKey.to_string().contains(ENCRYPTION_KEY_ENV));
        assert_eq!(SecretError::NoKey.code(), ErrorCode::ServiceUnavailable);
        // 63 hex digits is neither hex nor a 32-byte base64 key.
        assert!(SecretBox::new(&"a".repeat(63)).is_err());
    }

    #[test]
    fn generated_keys_are_accepted_and_distinct() {
        let a = SecretBox::generate_key().unwrap();
        let b = SecretBox::generate_key().unwrap();
        assert_ne!(a, b);
        let boxed = SecretBox::new(&a).unwrap();
        assert_eq!(boxed.open(&boxed.seal("x").unwrap()).unwrap(), "x");
    }

    #[test]
    fn sealed_text_has_the_versioned_format_and_a_fresh_nonce() {
        let b = test_box();
        let s1 = b.seal("same").unwrap();
        let s2 = b.seal("same").unwrap();
        assert_ne!(s1, s2);
        let prefix = format!("v1:{}:", b.key_id());
        assert!(s1.starts_with(&prefix), "{s1}");
        assert!(!s1.contains("same"));
        assert!(!format!("{b:?}").contains(KEY_B64));
    }

    #[test]
    fn open_names_what_is_wrong() {
        let b = test_box();
        let sealed = b.seal("x").unwrap();
        assert!(matches!(
            b.open("plain text"),
            Err(SecretError::Malformed(_))
        ));
        assert!(matches!(b.open(""), Err(SecretError::Malformed(_))));
        let v9 = sealed.replacen("v1:", "v9:", 1);
        assert_eq!(
            b.open(&v9),
            Err(SecretError::UnsupportedVersion("v9".into()))
        );
        let other = SecretBox::from_key_bytes([7; 32]);
        let err = other.open(&sealed).unwrap_err();
        assert!(matches!(err, SecretError::WrongKey { .. }), "{err:?}");
        assert!(err.to_string().contains(b.key_id()));
        let cut = &sealed[..sealed.len() - 10];
        assert!(b.open(cut).is_err());
        let short = format!("v1:{}:AAAA", b.key_id());
        assert!(matches!(b.open(&short), Err(SecretError::Malformed(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn seal_then_open_returns_any_string(text in any::<String>()) {
            let b = test_box();
            let sealed = b.seal(&text).unwrap();
            prop_assert_eq!(b.open(&sealed).unwrap(), text);
        }

        #[test]
        fn changing_any_byte_of_sealed_text_is_detected(
            text in any::<String>(),
            position in any::<prop::sample::Index>(),
            replacement in proptest::char::range('!', '~'),
        ) {
            let b = test_box();
            let sealed = b.seal(&text).unwrap();
            let i = position.index(sealed.len());
            // Sealed text is ASCII, so every index is a char boundary.
            let original = sealed.as_bytes()[i] as char;
            prop_assume!(original != replacement);
            let mut tampered = sealed.clone();
            tampered.replace_range(i..=i, &replacement.to_string());
            prop_assert!(b.open(&tampered).is_err(), "tampered at {} still opened", i);
        }

        #[test]
        fn a_different_key_never_opens_a_sealed_value(
            text in any::<String>(),
            other_key in any::<[u8; 32]>(),
        ) {
            let b = test_box();
            let other = SecretBox::from_key_bytes(other_key);
            prop_assume!(other.key_id() != b.key_id());
            let sealed = b.seal(&text).unwrap();
            let is_wrong_key = matches!(other.open(&sealed), Err(SecretError::WrongKey { .. }));
            prop_assert!(is_wrong_key);
            // Even with the key id forged to the other key's, authentication fails.
            let forged = sealed.replacen(b.key_id(), other.key_id(), 1);
            prop_assert_eq!(other.open(&forged), Err(SecretError::Tampered));
        }

        #[test]
        fn truncating_sealed_text_is_detected(text in ".{0,40}", cut in 1usize..20) {
            let b = test_box();
            let sealed = b.seal(&text).unwrap();
            let cut = cut.min(sealed.len());
            prop_assert!(b.open(&sealed[..sealed.len() - cut]).is_err());
        }
    }
}
