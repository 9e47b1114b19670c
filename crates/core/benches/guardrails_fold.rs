//! Guardrails + fold throughput benchmark (filled by the core-rules work).
fn main() {}
