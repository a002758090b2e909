//! Automatic extraction (`memory.auto_extract`): after a completed run the model is shown the
//! exchange and asked for the durable facts in it; each goes to the user's scope through
//! [`MemoryBank::remember`], so one that is already known refreshes the stored memory instead
//! of repeating it.

use agentry_llm::{ChatMessage, ChatModel, ChatRequest};
use agentry_schema::events::TokenUsage;
use serde_json::Value;

use super::{Fact, MemoryBank, Remembered, Who};

/// Facts taken from one exchange, at most.
pub const MAX_FACTS: usize = 10;

/// The instructions of the extraction call. The answer is JSON so that it is parsed, not
/// guessed from prose.
pub const EXTRACTION_PROMPT: &str = "You extract long-term memories from a conversation turn. \
List the durable facts about the user, their preferences, their environment and their decisions \
that will still be useful in later conversations. Leave out small talk, questions, one-off \
requests and anything the assistant said that the user did not confirm. Each fact is one short \
self-contained sentence. Answer with JSON only, exactly {\"facts\": [\"...\"]}; {\"facts\": []} \
when there is nothing worth remembering.";

/// The extraction call for one exchange.
pub fn extraction_request(user_message: &str, answer: &str) -> ChatRequest {
    ChatRequest {
        system: Some(EXTRACTION_PROMPT.to_string()),
        messages: vec![ChatMessage::User {
            content: format!(
                "The user said:\n<<<\n{user_message}\n>>>\n\nThe assistant answered:\n<<<\n{answer}\n>>>"
            ),
        }],
        tools: Vec::new(),
        temperature: Some(0.0),
        max_tokens: Some(512),
    }
}

/// The facts in the model's answer: the JSON object (code fences and prose around it are
/// tolerated), its `facts` strings trimmed, empty ones dropped, at most [`MAX_FACTS`].
/// Anything else yields no facts.
pub fn parse_facts(answer: &str) -> Vec<String> {
    let (Some(start), Some(end)) = (answer.find('{'), answer.rfind('}')) else {
        return Vec::new();
    };
    if end < start {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_str::<Value>(&answer[start..=end]) else {
        return Vec::new();
    };
    json.get("facts")
        .and_then(Value::as_array)
        .map(|facts| {
            facts
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .take(MAX_FACTS)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// What one extraction did.
#[derive(Debug, Default)]
pub struct Extracted {
    pub stored: Vec<Remembered>,
    pub usage: TokenUsage,
}

/// Ask `model` for the facts of the exchange and remember them for `who` (user scope), with
/// `fact`'s source. A fact the bank refuses (too long, say) is skipped.
pub async fn extract_and_remember(
    bank: &MemoryBank,
    model: &dyn ChatModel,
    who: &Who,
    source: Fact,
    user_message: &str,
    answer: &str,
) -> Result<Extracted, agentry_llm::LlmError> {
    let response = agentry_llm::complete(model, extraction_request(user_message, answer)).await?;
    let mut out = Extracted {
        usage: response.usage,
        ..Extracted::default()
    };
    for fact in parse_facts(&response.text) {
        let f = Fact {
            content: fact,
            ..source.clone()
        };
        match bank.remember(who, f).await {
            Ok(r) => out.stored.push(r),
            Err(e) => tracing::warn!(error = %e, "an extracted fact was not stored"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_read_from_json_even_inside_a_code_fence() {
        assert_eq!(
            parse_facts(
                "```json\n{\"facts\": [\" We run PostgreSQL 16 \", \"\", \"Team is in Berlin\"]}\n```"
            ),
            vec!["We run PostgreSQL 16", "Team is in Berlin"]
        );
    }

    #[test]
    fn anything_but_the_json_shape_yields_no_facts() {
        for bad in [
            "",
            "no facts here",
            "{\"facts\": \"one\"}",
            "{not json}",
            "} {",
            "{\"other\": [\"x\"]}",
        ] {
            assert!(parse_facts(bad).is_empty(), "{bad:?}");
        }
        let many: Vec<String> = (0..30).map(|i| format!("\"fact {i}\"")).collect();
        assert_eq!(
            parse_facts(&format!("{{\"facts\": [{}]}}", many.join(","))).len(),
            MAX_FACTS
        );
    }
}
