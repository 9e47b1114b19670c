//! The metering use cases each Lambda runs over the ports: discover, aggregate, clean up, submit (being written).
