//! Which model a run talks to, as configuration: the `[llm]` section (`AGENTRY_LLM__*`), merged
//! with an assistant's `provider`/`model` overrides by [`ModelConfig::with_overrides`], then
//! turned into a client by [`build_model`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agentry_schema::secret::Secret;
use serde::{Deserialize, Serialize};

use crate::retry::{MAX_DELAY, MAX_RETRY_AFTER, RetryPolicy};
use crate::{AnthropicModel, ChatModel, LlmError, OpenAiModel, ScriptedModel};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The built-in deterministic model: no key, no network.
    #[default]
    Scripted,
    /// Any OpenAI-compatible chat completions endpoint (OpenAI, DeepSeek, Ollama, vLLM…).
    #[serde(rename = "openai")]
    OpenAi,
    Anthropic,
}

impl Provider {
    pub const ALL: [Provider; 3] = [Provider::Scripted, Provider::OpenAi, Provider::Anthropic];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Scripted => "scripted",
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// Where requests go when no `base_url` is configured.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Scripted => None,
            Provider::OpenAi => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com"),
        }
    }

    /// The model used when none is configured.
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::Scripted => "scripted",
            Provider::OpenAi => "gpt-4o-mini",
            Provider::Anthropic => "claude-sonnet-4-5",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = LlmError;

    /// Case-insensitive; the error lists the valid names.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let wanted = name.trim().to_ascii_lowercase();
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == wanted)
            .ok_or_else(|| {
                LlmError::Config(format!(
                    "unknown model provider `{}`: use `scripted`, `openai` (any OpenAI-compatible endpoint) or `anthropic`",
                    name.trim()
                ))
            })
    }
}

/// Endpoint and key of one provider, used when an assistant picks a provider other than the
/// server default (`AGENTRY_LLM__OPENAI__API_KEY`, `AGENTRY_LLM__ANTHROPIC__BASE_URL`, …), and as
/// a fallback for the default provider's own `base_url`/`api_key`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderEndpoint {
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
}

/// The model configuration (`[llm]`, `AGENTRY_LLM__*`). Every field has a default, so an empty
/// section gives the scripted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    pub provider: Provider,
    /// API root: `https://api.openai.com/v1`, `http://localhost:11434/v1` (Ollama),
    /// `https://api.anthropic.com`. Default: the provider's.
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
    /// Default: [`Provider::default_model`].
    pub model: Option<String>,
    /// Limit on waiting for the response head, then on each gap between streamed chunks.
    pub timeout_secs: u64,
    /// Retries of 429, 5xx, timeouts and connection failures before the answer starts.
    pub max_retries: u32,
    /// First retry delay; retry n waits `base_delay_ms * 2^n` unless the provider sends
    /// `Retry-After`.
    pub base_delay_ms: u64,
    /// Streamed (SSE) answers, or one JSON response per call.
    pub stream: bool,
    /// Endpoint of the OpenAI-compatible provider when it is not the default one.
    pub openai: ProviderEndpoint,
    /// Endpoint of Anthropic when it is not the default provider.
    pub anthropic: ProviderEndpoint,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: Provider::Scripted,
            base_url: None,
            api_key: None,
            model: None,
            timeout_secs: 120,
            max_retries: 3,
            base_delay_ms: 500,
            stream: true,
            openai: ProviderEndpoint::default(),
            anthropic: ProviderEndpoint::default(),
        }
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ModelConfig {
    /// A config for `provider` with everything else default.
    pub fn for_provider(provider: Provider) -> Self {
        Self {
            provider,
            ..Self::default()
        }
    }

    /// This config with an assistant's choices applied (`None` or empty = keep the default).
    ///
    /// Switching to another provider drops the default provider's `base_url`, `api_key` and
    /// `model` (they belong to the other provider); that provider's own section
    /// (`openai`/`anthropic`) and defaults apply instead.
    pub fn with_overrides(
        &self,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> Result<ModelConfig, LlmError> {
        let mut merged = self.clone();
        if let Some(name) = provider.map(str::trim).filter(|p| !p.is_empty()) {
            let provider: Provider = name.parse()?;
            if provider != self.provider {
                merged.provider = provider;
                merged.base_url = None;
                merged.api_key = None;
                merged.model = None;
            }
        }
        if let Some(model) = model.map(str::trim).filter(|m| !m.is_empty()) {
            merged.model = Some(model.to_string());
        }
        Ok(merged)
    }

    fn section(&self) -> Option<&ProviderEndpoint> {
        match self.provider {
            Provider::Scripted => None,
            Provider::OpenAi => Some(&self.openai),
            Provider::Anthropic => Some(&self.anthropic),
        }
    }

    /// The configured base URL (top level, else the provider's section), if any.
    pub fn configured_base_url(&self) -> Option<&str> {
        non_empty(&self.base_url).or_else(|| self.section().and_then(|s| non_empty(&s.base_url)))
    }

    /// The configured API key (top level, else the provider's section), if any.
    pub fn configured_api_key(&self) -> Option<&Secret> {
        let usable = |k: &&Secret| !k.expose().trim().is_empty();
        self.api_key.as_ref().filter(usable).or_else(|| {
            self.section()
                .and_then(|s| s.api_key.as_ref().filter(usable))
        })
    }

    /// The base URL requests go to.
    pub fn effective_base_url(&self) -> Option<&str> {
        self.configured_base_url()
            .or_else(|| self.provider.default_base_url())
    }

    /// The model name sent to the provider.
    pub fn effective_model(&self) -> &str {
        non_empty(&self.model).unwrap_or_else(|| self.provider.default_model())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            base_delay: Duration::from_millis(self.base_delay_ms),
            max_delay: MAX_DELAY,
            max_retry_after: MAX_RETRY_AFTER,
        }
    }

    /// Check what [`build_model`] needs, without building anything.
    pub fn validate(&self) -> Result<(), LlmError> {
        if self.provider == Provider::Scripted {
            return Ok(());
        }
        if self.timeout_secs == 0 {
            return Err(LlmError::Config(
                "llm.timeout_secs must be at least 1 (AGENTRY_LLM__TIMEOUT_SECS)".into(),
            ));
        }
        let base_url = self.effective_base_url().unwrap_or_default();
        let url = reqwest::Url::parse(base_url).map_err(|e| {
            LlmError::Config(format!(
                "llm.base_url `{base_url}` is not a valid URL ({e}) (AGENTRY_LLM__BASE_URL)"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(LlmError::Config(format!(
                "llm.base_url `{base_url}` must be an http:// or https:// URL (AGENTRY_LLM__BASE_URL)"
            )));
        }
        // A key is required for the providers' public endpoints; a configured base URL may be a
        // local server (Ollama, vLLM) that needs none.
        if self.configured_api_key().is_none() && self.configured_base_url().is_none() {
            return Err(LlmError::Config(format!(
                "the `{provider}` model provider needs an API key: set AGENTRY_LLM__API_KEY \
                 (or AGENTRY_LLM__{section}__API_KEY when `{provider}` is chosen per assistant), \
                 or set a base URL for a local server that needs no key, or use the `scripted` provider",
                provider = self.provider,
                section = self.provider.as_str().to_ascii_uppercase(),
            )));
        }
        Ok(())
    }
}

/// The model client `config` describes. HTTP providers share `client` (and its connection pool).
pub fn build_model(
    config: &ModelConfig,
    client: reqwest::Client,
) -> Result<Arc<dyn ChatModel>, LlmError> {
    config.validate()?;
    let model = config.effective_model();
    let base_url = config.effective_base_url().unwrap_or_default();
    let api_key = config.configured_api_key().cloned();
    Ok(match config.provider {
        Provider::Scripted => Arc::new(ScriptedModel::new().with_model_name(model)),
        Provider::OpenAi => Arc::new(
            OpenAiModel::new(client, base_url, api_key, model)
                .with_streaming(config.stream)
                .with_timeout(config.timeout())
                .with_retry(config.retry_policy()),
        ),
        Provider::Anthropic => Arc::new(
            AnthropicModel::new(client, base_url, api_key, model)
                .with_streaming(config.stream)
                .with_timeout(config.timeout())
                .with_retry(config.retry_policy()),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> ModelConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_empty_section_is_the_scripted_model_with_defaults() {
        let c = config(serde_json::json!({}));
        assert_eq!(c, ModelConfig::default());
        assert_eq!(c.provider, Provider::Scripted);
        assert_eq!(c.timeout_secs, 120);
        assert_eq!(c.max_retries, 3);
        assert!(c.stream);
        let model = build_model(&c, reqwest::Client::new()).unwrap();
        assert_eq!(model.provider(), "scripted");
        assert_eq!(model.model(), "scripted");
    }

    #[test]
    fn real_providers_need_a_key_unless_a_base_url_is_set() {
        let c = config(serde_json::json!({"provider": "openai"}));
        let err = build_model(&c, reqwest::Client::new()).err().unwrap();
        assert!(
            matches!(&err, LlmError::Config(m) if m.contains("AGENTRY_LLM__API_KEY")),
            "{err}"
        );

        let c = config(
            serde_json::json!({"provider": "openai", "base_url": "http://localhost:11434/v1", "model": "llama3.2"}),
        );
        let model = build_model(&c, reqwest::Client::new()).unwrap();
        assert_eq!((model.provider(), model.model()), ("openai", "llama3.2"));

        let c = config(serde_json::json!({"provider": "anthropic", "api_key": "sk-ant"}));
        let model = build_model(&c, reqwest::Client::new()).unwrap();
        assert_eq!(
            (model.provider(), model.model()),
            ("anthropic", "claude-sonnet-4-5")
        );
        assert_eq!(c.effective_base_url(), Some("https://api.anthropic.com"));
    }

    #[test]
    fn bad_values_are_config_errors() {
        let err = serde_json::from_value::<ModelConfig>(serde_json::json!({"provider": "gpt"}))
            .unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
        let c = config(serde_json::json!({"provider": "openai", "base_url": "not a url"}));
        assert!(matches!(c.validate(), Err(LlmError::Config(m)) if m.contains("not a valid URL")));
        let c = config(serde_json::json!({"provider": "openai", "base_url": "ftp://x"}));
        assert!(matches!(c.validate(), Err(LlmError::Config(m)) if m.contains("http://")));
        let c =
            config(serde_json::json!({"provider": "openai", "api_key": "k", "timeout_secs": 0}));
        assert!(matches!(c.validate(), Err(LlmError::Config(m)) if m.contains("timeout_secs")));
    }

    #[test]
    fn overrides_pick_provider_and_model() {
        let base = config(serde_json::json!({
            "provider": "openai", "api_key": "sk-openai", "model": "gpt-x",
            "base_url": "https://proxy.example/v1",
            "anthropic": {"api_key": "sk-ant"}
        }));
        let same = base.with_overrides(Some("OpenAI"), Some("gpt-y")).unwrap();
        assert_eq!(same.provider, Provider::OpenAi);
        assert_eq!(same.effective_model(), "gpt-y");
        assert_eq!(same.effective_base_url(), Some("https://proxy.example/v1"));

        let switched = base.with_overrides(Some("anthropic"), None).unwrap();
        assert_eq!(switched.provider, Provider::Anthropic);
        assert_eq!(switched.effective_model(), "claude-sonnet-4-5");
        assert_eq!(
            switched.effective_base_url(),
            Some("https://api.anthropic.com")
        );
        assert_eq!(switched.configured_api_key().unwrap().expose(), "sk-ant");

        let scripted = base.with_overrides(Some("scripted"), None).unwrap();
        assert_eq!(
            build_model(&scripted, reqwest::Client::new())
                .unwrap()
                .provider(),
            "scripted"
        );

        assert_eq!(base.with_overrides(None, Some(" ")).unwrap(), base);
        assert!(matches!(
            base.with_overrides(Some("gemini"), None),
            Err(LlmError::Config(m)) if m.contains("unknown model provider `gemini`")
        ));
    }

    #[test]
    fn keys_never_print() {
        let c = config(serde_json::json!({"provider": "openai", "api_key": "sk-secret-value"}));
        assert!(!format!("{c:?}").contains("secret-value"));
        assert!(!serde_json::to_string(&c).unwrap().contains("secret-value"));
    }
}
