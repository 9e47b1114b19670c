//! awsmp-aws: thin AWS SDK adapters for the awsmp-core ports (being written).
