//! Aggregation of a group's accepted rows into one record (being written).
