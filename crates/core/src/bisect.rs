//! Bisection of a batch that failed with a request-level exception (being written).
