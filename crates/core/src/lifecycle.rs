//! Subscriber lifecycle transitions from Marketplace events (being written).
