//! Batching of metering records: one product, at most 25 records and 1 MB (being written).
