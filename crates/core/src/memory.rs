//! In-memory implementations of every port, for tests (being written).
