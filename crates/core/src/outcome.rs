//! Mapping of BatchMeterUsage outcomes to aggregated-row states (being written).
