//! Client-side guardrails: every reason code with its check (being written).
